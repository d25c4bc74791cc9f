#pragma once
// The classifier's matching engine as it was before the single-pass engine
// (issue 17): every rule's patterns as one alternation, searched line by line
// over the rule's window, newest line first, rule after rule. Test and bench
// code only: classifier_test.cpp checks the real classifier against it on a
// generated corpus, and bench/classifier_bench.cpp times both in one run.

#include "tasksup/supervisor/classifier.hpp"

#include <re2/re2.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tasksup::reference {

inline std::string_view basename_of(std::string_view cli) {
  auto slash = cli.rfind('/');
  return slash == std::string_view::npos ? cli : cli.substr(slash + 1);
}

inline bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

/// The explanation's line, cut around `focus` as classifier.hpp describes.
inline std::string display_line(std::string_view line, std::size_t focus) {
  if (line.size() <= max_display_line_bytes)
    return std::string{line};
  constexpr std::size_t context_before = 100;
  auto begin = focus > context_before ? focus - context_before : 0;
  begin = std::min(begin, line.size() - max_display_line_bytes);
  auto end = begin + max_display_line_bytes;
  for (int i = 0; i < 3 && begin < end && is_continuation_byte(line[begin]);
       ++i)
    ++begin;
  for (int i = 0; i < 3 && end < line.size() && end > begin &&
                  is_continuation_byte(line[end]);
       ++i)
    --end;
  std::string out;
  if (begin > 0)
    out += "...";
  out.append(line.data() + begin, end - begin);
  if (end < line.size())
    out += "...";
  return out;
}

/// The old engine. Rules are assumed valid (the real classifier::make
/// validated them first).
class classifier {
public:
  explicit classifier(std::vector<classifier_rule> rules)
    : rules_(std::move(rules)) {
    opts_.set_encoding(RE2::Options::EncodingLatin1);
    opts_.set_case_sensitive(false);
    opts_.set_log_errors(false);
    opts_.set_never_capture(true);
    opts_.set_max_mem(int64_t{8} << 20);
    for (const auto& rule : rules_) {
      compiled c;
      for (const auto& p : rule.patterns) {
        if (p.find("{agent_cli}") != std::string::npos)
          c.templated.push_back(p);
        else
          append_branch(c.fixed_source, p);
      }
      if (!c.fixed_source.empty())
        c.fixed = std::make_shared<RE2>(c.fixed_source, opts_);
      compiled_.push_back(std::move(c));
    }
  }

  classification classify(const attempt_outcome& outcome,
                          std::string_view agent_cli,
                          std::chrono::system_clock::time_point now) {
    classification result;
    if (!outcome.infrastructure_error.empty()) {
      result.cls = error_class::infrastructure;
      result.rule = "infrastructure";
      result.line = display_line(outcome.infrastructure_error, 0);
      return result;
    }
    auto agent_name = basename_of(agent_cli);
    const auto& tail = outcome.tail;
    for (std::size_t i = 0; i < rules_.size(); ++i) {
      const auto& rule = rules_[i];
      auto& comp = compiled_[i];
      bool any_cheap = false;
      bool all_cheap = true;
      auto check = [&](bool is_set, bool matched) {
        if (!is_set)
          return;
        any_cheap = any_cheap || matched;
        all_cheap = all_cheap && matched;
      };
      auto has = [](const std::vector<int>& xs, int x) {
        return std::find(xs.begin(), xs.end(), x) != xs.end();
      };
      check(!rule.exit_codes.empty(), has(rule.exit_codes, outcome.exit_code));
      check(rule.oom_killed.has_value(),
            rule.oom_killed && *rule.oom_killed == outcome.oom_killed);
      check(!rule.signals.empty(),
            outcome.signal != 0 && has(rule.signals, outcome.signal));
      auto window_begin =
        rule.window_lines == 0 || rule.window_lines >= tail.size()
          ? std::size_t{0}
          : tail.size() - rule.window_lines;
      std::optional<std::pair<std::size_t, std::size_t>> hit;
      bool matched = false;
      if (rule.match_all ? !all_cheap : any_cheap) {
        matched = !rule.match_all;
      } else if (rule.patterns.empty()) {
        matched = rule.match_all;
      } else {
        const RE2* re = comp.fixed.get();
        if (!comp.templated.empty() && !agent_name.empty()) {
          auto& slot = comp.per_agent[std::string{agent_name}];
          if (!slot) {
            auto quoted = RE2::QuoteMeta(
              re2::StringPiece{agent_name.data(), agent_name.size()});
            auto source = comp.fixed_source;
            for (auto p : comp.templated) {
              std::string::size_type at;
              while ((at = p.find("{agent_cli}")) != std::string::npos)
                p.replace(at, 11, quoted);
              append_branch(source, p);
            }
            slot = std::make_shared<RE2>(source, opts_);
          }
          if (slot->ok())
            re = slot.get();
        }
        if (re != nullptr) {
          for (auto k = tail.size(); k > window_begin; --k) {
            re2::StringPiece line{tail[k - 1]};
            re2::StringPiece m;
            if (re->Match(line, 0, line.size(), RE2::UNANCHORED, &m, 1)) {
              hit = std::pair{k - 1,
                              static_cast<std::size_t>(m.data() - line.data())};
              break;
            }
          }
        }
        matched = hit.has_value();
      }
      if (!matched)
        continue;
      result.cls = rule.cls;
      result.rule = rule.id;
      if (hit)
        result.line = display_line(tail[hit->first], hit->second);
      if (rule.cls == error_class::rate_limit) {
        for (auto k = tail.size(); k > window_begin; --k) {
          if (auto hint = parse_retry_after(tail[k - 1])) {
            result.retry_after_s = hint;
            break;
          }
        }
      }
      if (rule.cls == error_class::quota_exhausted) {
        for (auto k = tail.size(); k > window_begin; --k) {
          if (auto reset = parse_quota_reset(tail[k - 1], now)) {
            result.retry_after_s = reset;
            break;
          }
        }
      }
      return result;
    }
    result.cls = error_class::retryable;
    result.rule = "default";
    return result;
  }

private:
  struct compiled {
    std::shared_ptr<RE2> fixed;
    std::string fixed_source;
    std::vector<std::string> templated;
    std::map<std::string, std::shared_ptr<RE2>> per_agent;
  };

  static void append_branch(std::string& alternation,
                            const std::string& pattern) {
    if (!alternation.empty())
      alternation += '|';
    alternation += "(?:";
    alternation += pattern;
    alternation += ')';
  }

  std::vector<classifier_rule> rules_;
  std::vector<compiled> compiled_;
  RE2::Options opts_;
};

} // namespace tasksup::reference
