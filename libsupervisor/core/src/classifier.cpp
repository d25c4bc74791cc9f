#include "tasksup/supervisor/classifier.hpp"

#include <re2/filtered_re2.h>
#include <re2/re2.h>

#include <signal.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <utility>

namespace tasksup {

namespace {

constexpr std::string_view agent_cli_placeholder = "{agent_cli}";

/// Stands in for the agent name when a templated pattern is validated.
constexpr std::string_view sample_agent_cli = "agent";

/// Memory budget of one compiled regex: RE2 gives two thirds to the forward
/// program and its lazily built DFA cache, one third to the reverse program
/// (which finds where a match starts) and its cache. A DFA cache that fills
/// is discarded and rebuilt, or RE2 falls back to its linear NFA: the result
/// is the same, only slower, so this bounds memory, not correctness. The
/// caches live as long as the classifier (a node's for its whole life) and
/// output an agent prints decides what they hold, so the budget is the bound
/// whatever arrives: 1 MiB per rule plus 1 MiB per templated rule per cached
/// agent name (RE2's default, 8 MiB, allowed 2 GiB for the default rules
/// and 256 names). It also bounds a program: a rule's patterns together may
/// be up to ~87,000 literal characters (~17,000 `\w`); a larger rule is
/// reported as too large.
constexpr int64_t regex_max_mem = int64_t{1} << 20;

/// Output is untrusted bytes: Latin-1 maps every byte to one character so
/// invalid UTF-8 can never make a pattern fail to apply.
RE2::Options regex_options() {
  RE2::Options opts;
  opts.set_encoding(RE2::Options::EncodingLatin1);
  opts.set_case_sensitive(false);
  opts.set_log_errors(false);
  opts.set_never_capture(true);
  opts.set_max_mem(regex_max_mem);
  return opts;
}

re2::StringPiece piece(std::string_view str) {
  return re2::StringPiece{str.data(), str.size()};
}

bool contains(const std::vector<int>& xs, int x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

bool is_templated(const std::string& pattern) {
  return pattern.find(agent_cli_placeholder) != std::string::npos;
}

std::string substitute_agent(const std::string& pattern,
                             const std::string& quoted) {
  std::string out;
  out.reserve(pattern.size() + quoted.size());
  std::size_t pos = 0;
  for (;;) {
    auto hit = pattern.find(agent_cli_placeholder, pos);
    if (hit == std::string::npos)
      break;
    out.append(pattern, pos, hit - pos);
    out += quoted;
    pos = hit + agent_cli_placeholder.size();
  }
  out.append(pattern, pos, std::string::npos);
  return out;
}

/// Appends `(?:pattern)` as one more branch of an alternation. Each pattern
/// was compiled on its own first, so wrapping cannot change its meaning.
void append_branch(std::string& alternation, const std::string& pattern) {
  if (!alternation.empty())
    alternation += '|';
  alternation += "(?:";
  alternation += pattern;
  alternation += ')';
}

std::string_view basename_of(std::string_view cli) {
  auto slash = cli.rfind('/');
  return slash == std::string_view::npos ? cli : cli.substr(slash + 1);
}

bool is_continuation_byte(char c) {
  return (static_cast<unsigned char>(c) & 0xC0) == 0x80;
}

/// The line as shown in explanations: the whole line when it is short, else
/// `max_display_line_bytes` around `focus` (where the match starts), with
/// "..." marking what was cut. Cuts avoid splitting a UTF-8 sequence.
std::string display_line(std::string_view line, std::size_t focus) {
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
  out.reserve(end - begin + 6);
  if (begin > 0)
    out += "...";
  out.append(line.data() + begin, end - begin);
  if (end < line.size())
    out += "...";
  return out;
}

} // namespace

/// One rule ready to match: its patterns without `{agent_cli}` compiled into
/// one alternation, and the templated ones kept as text for per-agent
/// substitution.
struct compiled_rule {
  std::shared_ptr<const RE2> fixed;
  std::string fixed_source;
  std::vector<std::string> fixed_patterns;
  std::vector<std::string> templated;
};

/// Most agent-specific engines kept at once (each ~0.3 MB of compiled
/// prefilter for the default rules, plus its regexes' caches). A node runs a
/// handful of agents; beyond this many names the cache starts over rather
/// than grow.
constexpr std::size_t max_cached_agent_engines = 32;

/// Longest agent name whose engine is kept: a file name cannot be longer
/// (NAME_MAX), so a longer one is not a command that ran. Its engine is
/// built for the call and freed, so names of any length cannot fill the
/// cache with large programs.
constexpr std::size_t max_cached_agent_name_bytes = 255;

struct classifier::impl {
  struct engine;

  std::vector<classifier_rule> rules;
  std::vector<compiled_rule> compiled;
  RE2::Options options = regex_options();
  bool any_templated = false;

  /// The engine without an agent name (templated patterns left out).
  std::shared_ptr<const engine> plain;

  /// Engines with `{agent_cli}` filled in, per agent name: building one
  /// costs far more than matching a tail, and a node asks again and again
  /// for the same few agents. Not part of the classifier's value; guarded so
  /// one classifier can still be shared between threads.
  mutable std::mutex cache_mtx;
  mutable std::map<std::string, std::shared_ptr<const engine>, std::less<>>
    per_agent;

  std::shared_ptr<const engine> build_engine(std::string_view agent_name) const;
  std::shared_ptr<const engine> engine_for(std::string_view agent_name) const;
};

/// The matching engine for one agent name: every rule's patterns compiled
/// into one alternation (used to confirm a line and find where the match
/// starts, exactly as a rule is defined), and all patterns of all rules
/// behind one literal prefilter. RE2's FilteredRE2 reduces each pattern to
/// the literals ("atoms") any match must contain; one pass over a line finds
/// which atoms occur (a table of their two-byte pieces, ASCII case folded),
/// and only rules whose atoms occur in a line run their regex on that line.
/// A pattern with no usable atom runs on every line of its window.
struct classifier::impl::engine {
  /// Per rule: its alternation (null when none of its patterns can apply)
  /// and whether it must run on every line of its window.
  std::vector<std::shared_ptr<const RE2>> rule_re;
  std::vector<char> always_scan;

  /// The prefilter; null when no pattern has atoms.
  std::unique_ptr<re2::FilteredRE2> filter;
  /// FilteredRE2 pattern id -> rule index.
  std::vector<std::size_t> filter_rule;
  std::vector<std::string> atoms;
  /// Atoms the byte table cannot look for (shorter than two bytes or with a
  /// non-ASCII byte, whose case folding RE2 and the table might not agree
  /// on): reported as present in every line, which only costs speed.
  std::vector<int> assumed_atoms;

  /// One two-byte piece of an atom: `offset` bytes into atom `atom`.
  struct probe {
    std::uint16_t bigram;
    std::uint16_t offset;
    std::uint32_t atom;
  };
  std::vector<probe> probes; // sorted by bigram
  /// Raw (unfolded) two-byte values of every case variant of the pieces,
  /// indexed by the two bytes as one little-endian 16-bit load: one test per
  /// visited position.
  std::array<std::uint64_t, 65536 / 64> raw_bits{};
  /// Folded piece -> its run in `probes`, open addressing (power of two).
  struct slot {
    std::uint16_t bigram = 0;
    std::uint32_t count = 0; // 0: empty
    std::uint32_t first = 0;
  };
  std::vector<slot> slots;
  /// Positions the scan steps by: every atom is at least `stride` + 1 bytes
  /// long and each of its first `stride` pieces is in the table, so an
  /// occurrence always covers one visited position.
  std::size_t stride = 1;

  /// Appends the ids of the atoms occurring in `line` (each once) to `out`;
  /// `seen` is scratch of atoms.size(), all values below `stamp`.
  void find_atoms(std::string_view line, std::vector<int>& out,
                  std::vector<std::size_t>& seen, std::size_t stamp) const;
};

namespace {

/// ASCII case folding, the one FilteredRE2 applies to its atoms.
constexpr std::array<unsigned char, 256> make_fold_table() {
  std::array<unsigned char, 256> t{};
  for (std::size_t c = 0; c < 256; ++c)
    t[c] = static_cast<unsigned char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return t;
}

constexpr std::array<unsigned char, 256> fold_table = make_fold_table();

/// Shortest atom FilteredRE2 extracts; shorter literals leave a pattern
/// unfiltered (scanned on every line).
constexpr int min_atom_len = 3;

/// Longest step of the atom scan. A longer step visits fewer positions but
/// puts more of each atom's pieces (and so more common ones) in the table.
constexpr std::size_t max_stride = 2;

/// Longest atom the table indexes (its piece offsets are 16 bits); a longer
/// one is assumed present.
constexpr std::size_t max_indexed_atom = 4096;

/// How common a byte is in agent output, roughly: English letter
/// frequencies, digits (timestamps, counters) and blanks high. Used only to
/// pick which pieces of an atom go in the table; any choice is correct.
constexpr unsigned byte_commonness(unsigned char c) {
  constexpr const char* by_frequency = "etaoinshrdlcumwfgypbvkjxqz";
  if (c == ' ' || c == '\t')
    return 40;
  if (c >= '0' && c <= '9')
    return 20;
  for (unsigned i = 0; by_frequency[i] != 0; ++i)
    if (static_cast<unsigned char>(by_frequency[i]) == c)
      return 26 - i;
  return 1;
}

/// Where an atom's `stride` consecutive pieces go in the table: the window
/// whose pieces look rarest, so that few positions of a line hit the table.
std::size_t rarest_window(std::string_view atom, std::size_t stride) {
  std::size_t best = 0;
  unsigned best_score = ~0u;
  for (std::size_t j = 0; j + stride + 1 <= atom.size(); ++j) {
    unsigned score = 0;
    for (std::size_t o = j; o < j + stride; ++o)
      score += byte_commonness(static_cast<unsigned char>(atom[o])) *
               byte_commonness(static_cast<unsigned char>(atom[o + 1]));
    if (score < best_score) {
      best_score = score;
      best = j;
    }
  }
  return best;
}

std::size_t slot_hash(std::uint16_t bigram) {
  return (bigram * std::size_t{0x9E3779B1u}) >> 16;
}

/// Sets the bit of the two bytes `a`, `b` as a little-endian 16-bit value.
void set_raw(std::array<std::uint64_t, 1024>& bits, unsigned char a,
             unsigned char b) {
  auto v = static_cast<std::uint16_t>(a | b << 8);
  bits[v >> 6] |= std::uint64_t{1} << (v & 63);
}

unsigned char upper(unsigned char c) {
  return c >= 'a' && c <= 'z' ? static_cast<unsigned char>(c - 'a' + 'A') : c;
}

std::uint16_t bigram_at(const unsigned char* p) {
  return static_cast<std::uint16_t>(fold_table[p[0]] << 8 | fold_table[p[1]]);
}

bool is_plain_ascii(std::string_view atom) {
  return std::all_of(atom.begin(), atom.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x80;
  });
}

} // namespace

void classifier::impl::engine::find_atoms(std::string_view line,
                                          std::vector<int>& out,
                                          std::vector<std::size_t>& seen,
                                          std::size_t stamp) const {
  if (probes.empty())
    return;
  const auto* p = reinterpret_cast<const unsigned char*>(line.data());
  const auto n = line.size();
  const auto mask = slots.size() - 1;
  // Locals, so the hot loop keeps them in registers.
  const auto step = stride;
  const std::uint64_t* bits = raw_bits.data();
  auto in_table = [&](std::size_t at) {
    std::uint16_t raw;
    std::memcpy(&raw, p + at, sizeof raw);
    return (bits[raw >> 6] & (std::uint64_t{1} << (raw & 63))) != 0;
  };
  for (std::size_t i = 0; i + 1 < n; i += step) {
    if (!in_table(i))
      continue;
    // With a step of two an atom's two pieces overlap by a byte: the piece
    // found here is the first (then the other starts a byte later) or the
    // second (the other starts a byte earlier) of the pair.
    if (step == 2 && !(i + 2 < n && in_table(i + 1)) &&
        !(i > 0 && in_table(i - 1)))
      continue;
    auto bg = bigram_at(p + i);
    const slot* hit = nullptr;
    for (auto h = slot_hash(bg) & mask;; h = (h + 1) & mask) {
      if (slots[h].count == 0)
        break;
      if (slots[h].bigram == bg) {
        hit = &slots[h];
        break;
      }
    }
    if (hit == nullptr)
      continue;
    for (auto k = hit->first; k < hit->first + hit->count; ++k) {
      const auto& pr = probes[k];
      if (seen[pr.atom] == stamp || i < pr.offset)
        continue;
      const auto& atom = atoms[pr.atom];
      auto start = i - pr.offset;
      if (start + atom.size() > n)
        continue;
      bool equal = true;
      for (std::size_t j = 0; j < atom.size() && equal; ++j)
        equal = fold_table[p[start + j]] == static_cast<unsigned char>(atom[j]);
      if (equal) {
        seen[pr.atom] = stamp;
        out.push_back(static_cast<int>(pr.atom));
      }
    }
  }
}

std::shared_ptr<const classifier::impl::engine>
classifier::impl::build_engine(std::string_view agent_name) const {
  auto out = std::make_shared<engine>();
  out->rule_re.resize(rules.size());
  out->always_scan.assign(rules.size(), 0);
  auto filter = std::make_unique<re2::FilteredRE2>(min_atom_len);
  std::string quoted;
  if (!agent_name.empty())
    quoted = RE2::QuoteMeta(piece(agent_name));
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& rule = compiled[i];
    std::vector<std::string> sources = rule.fixed_patterns;
    out->rule_re[i] = rule.fixed;
    if (!rule.templated.empty() && !agent_name.empty()) {
      auto source = rule.fixed_source;
      std::vector<std::string> substituted;
      for (const auto& pattern : rule.templated) {
        substituted.push_back(substitute_agent(pattern, quoted));
        append_branch(source, substituted.back());
      }
      auto re = std::make_shared<const RE2>(piece(source), options);
      // Only an absurdly long agent name can fail here (max_mem); the
      // templated patterns then cannot match, the others still do.
      if (re->ok()) {
        out->rule_re[i] = std::move(re);
        sources.insert(sources.end(), substituted.begin(), substituted.end());
      }
    }
    if (!out->rule_re[i])
      continue;
    for (const auto& source : sources) {
      int id = 0;
      if (filter->Add(piece(source), options, &id) != RE2::NoError) {
        out->always_scan[i] = 1;
        continue;
      }
      out->filter_rule.push_back(i);
    }
  }
  if (out->filter_rule.empty())
    return out;
  filter->Compile(&out->atoms);
  // Patterns left without atoms are potential whatever the line holds.
  std::vector<int> unfiltered;
  filter->AllPotentials({}, &unfiltered);
  for (auto id : unfiltered)
    out->always_scan[out->filter_rule[static_cast<std::size_t>(id)]] = 1;
  std::size_t shortest = max_stride + 1;
  for (std::size_t a = 0; a < out->atoms.size(); ++a) {
    const auto& atom = out->atoms[a];
    if (atom.size() < 2 || atom.size() > max_indexed_atom ||
        !is_plain_ascii(atom))
      out->assumed_atoms.push_back(static_cast<int>(a));
    else
      shortest = std::min(shortest, atom.size());
  }
  out->stride = shortest - 1;
  for (std::size_t a = 0; a < out->atoms.size(); ++a) {
    const auto& atom = out->atoms[a];
    if (atom.size() < 2 || atom.size() > max_indexed_atom ||
        !is_plain_ascii(atom))
      continue;
    auto first = rarest_window(atom, out->stride);
    for (auto o = first; o < first + out->stride; ++o) {
      auto bg =
        bigram_at(reinterpret_cast<const unsigned char*>(atom.data()) + o);
      auto lo = static_cast<unsigned char>(bg >> 8);
      auto hi = static_cast<unsigned char>(bg & 0xFF);
      for (auto x : {lo, upper(lo)})
        for (auto y : {hi, upper(hi)})
          set_raw(out->raw_bits, x, y);
      out->probes.push_back(engine::probe{bg, static_cast<std::uint16_t>(o),
                                          static_cast<std::uint32_t>(a)});
    }
  }
  std::sort(out->probes.begin(), out->probes.end(),
            [](const engine::probe& a, const engine::probe& b) {
              return a.bigram < b.bigram;
            });
  std::size_t size = 16;
  while (size < 2 * out->probes.size())
    size *= 2;
  out->slots.resize(size);
  for (std::size_t k = 0; k < out->probes.size(); ++k) {
    auto bg = out->probes[k].bigram;
    auto h = slot_hash(bg) & (size - 1);
    while (out->slots[h].count != 0 && out->slots[h].bigram != bg)
      h = (h + 1) & (size - 1);
    auto& sl = out->slots[h];
    if (sl.count == 0) {
      sl.bigram = bg;
      sl.first = static_cast<std::uint32_t>(k);
    }
    ++sl.count;
  }
  out->filter = std::move(filter);
  return out;
}

std::shared_ptr<const classifier::impl::engine>
classifier::impl::engine_for(std::string_view agent_name) const {
  if (!any_templated || agent_name.empty())
    return plain;
  {
    std::lock_guard<std::mutex> guard{cache_mtx};
    if (auto i = per_agent.find(agent_name); i != per_agent.end())
      return i->second;
  }
  auto built = build_engine(agent_name);
  if (agent_name.size() > max_cached_agent_name_bytes)
    return built;
  std::lock_guard<std::mutex> guard{cache_mtx};
  if (per_agent.size() >= max_cached_agent_engines)
    per_agent.clear();
  per_agent.emplace(std::string{agent_name}, built);
  return built;
}

namespace {

error rule_error(std::size_t index, std::string path, std::string what) {
  return error{"classifier rules",
               "/" + std::to_string(index) + std::move(path), std::move(what)};
}

std::string rule_label(const classifier_rule& rule) {
  return "rule '" + rule.id + "'";
}

/// What the exit code, signal and OOM flag say about one rule.
enum class cheap_verdict { matched, not_matched, patterns_decide };

cheap_verdict cheap_criteria(const classifier_rule& rule,
                             const attempt_outcome& outcome) {
  bool any_cheap = false;
  bool all_cheap = true;
  auto check = [&](bool is_set, bool matched) {
    if (!is_set)
      return;
    any_cheap = any_cheap || matched;
    all_cheap = all_cheap && matched;
  };
  check(!rule.exit_codes.empty(), contains(rule.exit_codes, outcome.exit_code));
  check(rule.oom_killed.has_value(),
        rule.oom_killed && *rule.oom_killed == outcome.oom_killed);
  check(!rule.signals.empty(),
        outcome.signal != 0 && contains(rule.signals, outcome.signal));
  if (rule.match_all ? !all_cheap : any_cheap)
    return rule.match_all ? cheap_verdict::not_matched : cheap_verdict::matched;
  if (rule.patterns.empty())
    // match_all with only cheap criteria, all of which matched.
    return rule.match_all ? cheap_verdict::matched : cheap_verdict::not_matched;
  return cheap_verdict::patterns_decide;
}

/// First tail index a rule's window covers.
std::size_t window_begin(const classifier_rule& rule, std::size_t lines) {
  return rule.window_lines == 0 || rule.window_lines >= lines
           ? std::size_t{0}
           : lines - rule.window_lines;
}

/// A rule whose patterns decide, while the tail is scanned.
struct candidate {
  std::size_t rule = 0;
  std::size_t begin = 0; // window_begin
  const RE2* re = nullptr;
  bool always_scan = false;
  /// Line index + 1 of the last line whose atoms make this rule potential.
  std::size_t potential_at = 0;
};

} // namespace

expected<classifier> classifier::make(std::vector<classifier_rule> rules) {
  auto ptr = std::make_shared<impl>();
  ptr->compiled.reserve(rules.size());
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& rule = rules[i];
    if (rule.id.empty())
      return rule_error(i, "/id", "rule has an empty id");
    for (std::size_t k = 0; k < i; ++k)
      if (rules[k].id == rule.id)
        return rule_error(i, "/id",
                          "duplicate rule id '" + rule.id + "' (also rule " +
                            std::to_string(k) + ")");
    if (rule.exit_codes.empty() && !rule.oom_killed && rule.signals.empty() &&
        rule.patterns.empty())
      return rule_error(i, "",
                        rule_label(rule) +
                          " sets no criterion (exit_codes, oom_killed, "
                          "signals or patterns)");
    compiled_rule out;
    for (std::size_t j = 0; j < rule.patterns.size(); ++j) {
      const auto& pattern = rule.patterns[j];
      auto path = "/patterns/" + std::to_string(j);
      if (pattern.empty())
        return rule_error(i, path,
                          rule_label(rule) +
                            ": empty pattern (it would match every line)");
      auto templated = is_templated(pattern);
      auto source = templated
                      ? substitute_agent(pattern, std::string{sample_agent_cli})
                      : pattern;
      RE2 re{piece(source), ptr->options};
      if (!re.ok())
        return rule_error(i, path,
                          rule_label(rule) + ": invalid pattern '" + pattern +
                            "': " + re.error());
      if (templated) {
        out.templated.push_back(pattern);
        ptr->any_templated = true;
      } else {
        append_branch(out.fixed_source, pattern);
        out.fixed_patterns.push_back(pattern);
      }
    }
    if (!out.fixed_source.empty()) {
      auto fixed =
        std::make_shared<const RE2>(piece(out.fixed_source), ptr->options);
      if (!fixed->ok())
        return rule_error(i, "/patterns",
                          rule_label(rule) +
                            ": patterns together too large: " + fixed->error());
      out.fixed = std::move(fixed);
    }
    ptr->compiled.push_back(std::move(out));
  }
  ptr->rules = std::move(rules);
  ptr->plain = ptr->build_engine({});
  return classifier{std::move(ptr)};
}

classification
classifier::classify(const attempt_outcome& outcome, std::string_view agent_cli,
                     std::chrono::system_clock::time_point now) const {
  classification result;
  if (!outcome.lost_node.empty()) {
    result.cls = error_class::infrastructure;
    result.rule = std::string{node_lost_rule_prefix} + outcome.lost_node;
    result.lost_node = outcome.lost_node;
    result.line = display_line(outcome.infrastructure_error, 0);
    return result;
  }
  if (!outcome.infrastructure_error.empty()) {
    result.cls = error_class::infrastructure;
    result.rule = "infrastructure";
    result.line = display_line(outcome.infrastructure_error, 0);
    return result;
  }
  const auto& rules = impl_->rules;
  const auto& tail = outcome.tail;
  auto eng = impl_->engine_for(basename_of(agent_cli));

  // The exit code, signal and OOM flag decide most rules at once; the first
  // rule they match bounds the rules whose patterns still need the tail.
  auto winner = rules.size();
  std::vector<candidate> candidates;
  if (!tail.empty())
    candidates.reserve(rules.size());
  for (std::size_t i = 0; i < rules.size() && winner == rules.size(); ++i) {
    switch (cheap_criteria(rules[i], outcome)) {
      case cheap_verdict::matched:
        winner = i;
        break;
      case cheap_verdict::not_matched:
        break;
      case cheap_verdict::patterns_decide:
        // No line, no match: an empty tail leaves the decision to the
        // cheap criteria.
        if (!tail.empty() && eng->rule_re[i])
          candidates.push_back(candidate{i, window_begin(rules[i], tail.size()),
                                         eng->rule_re[i].get(),
                                         eng->always_scan[i] != 0, 0});
        break;
    }
  }

  // One pass over the tail, newest line first, for all candidates at once:
  // the first candidate (by priority) with a matching line in its window
  // wins, its newest matching line is the one shown.
  auto best = candidates.size();
  std::size_t hit_line = 0;
  std::size_t hit_offset = 0;
  if (!candidates.empty()) {
    std::vector<int> line_atoms;
    std::vector<int> potentials;
    std::vector<std::size_t> seen(eng->atoms.size(), 0);
    auto lowest = [&] {
      std::size_t low = tail.size();
      for (std::size_t c = 0; c < best; ++c)
        low = std::min(low, candidates[c].begin);
      return low;
    };
    for (auto k = tail.size(); k > lowest(); --k) {
      const auto& line = tail[k - 1];
      bool atoms_checked = false;
      for (std::size_t c = 0; c < best; ++c) {
        auto& cand = candidates[c];
        if (k - 1 < cand.begin)
          continue;
        if (!cand.always_scan) {
          if (!atoms_checked) {
            atoms_checked = true;
            line_atoms.clear();
            eng->find_atoms(line, line_atoms, seen, k);
            if (!line_atoms.empty() || !eng->assumed_atoms.empty()) {
              line_atoms.insert(line_atoms.end(), eng->assumed_atoms.begin(),
                                eng->assumed_atoms.end());
              potentials.clear();
              eng->filter->AllPotentials(line_atoms, &potentials);
              for (auto id : potentials) {
                auto rule = eng->filter_rule[static_cast<std::size_t>(id)];
                for (auto& other : candidates)
                  if (other.rule == rule)
                    other.potential_at = k;
              }
            }
          }
          if (cand.potential_at != k)
            continue;
        }
        auto text = piece(line);
        re2::StringPiece m;
        if (cand.re->Match(text, 0, text.size(), RE2::UNANCHORED, &m, 1)) {
          best = c;
          hit_line = k - 1;
          hit_offset = static_cast<std::size_t>(m.data() - text.data());
          break;
        }
      }
    }
  }

  std::size_t matched_rule = winner;
  if (best < candidates.size())
    matched_rule = candidates[best].rule;
  if (matched_rule == rules.size()) {
    result.cls = error_class::retryable;
    result.rule = "default";
    return result;
  }
  const auto& rule = rules[matched_rule];
  result.cls = rule.cls;
  result.rule = rule.id;
  if (best < candidates.size())
    result.line = display_line(tail[hit_line], hit_offset);
  if (rule.cls == error_class::rate_limit ||
      rule.cls == error_class::quota_exhausted) {
    // The hint may sit on its own line ("Retry-After: 30" under the "429"):
    // the first one found from the newest line of the rule's window.
    for (auto k = tail.size(); k > window_begin(rule, tail.size()); --k) {
      auto hint = rule.cls == error_class::rate_limit
                    ? parse_retry_after(tail[k - 1])
                    : parse_quota_reset(tail[k - 1], now);
      if (hint) {
        result.retry_after_s = hint;
        break;
      }
    }
  }
  return result;
}

const std::vector<classifier_rule>& classifier::rules() const noexcept {
  return impl_->rules;
}

classifier::classifier(std::shared_ptr<const impl> ptr)
  : impl_(std::move(ptr)) {}

// Moves share the immutable implementation instead of emptying the source,
// so a moved-from classifier is still a valid one.
classifier::classifier(classifier&& other) noexcept : impl_(other.impl_) {}

classifier& classifier::operator=(classifier&& other) noexcept {
  impl_ = other.impl_;
  return *this;
}

classifier::classifier(const classifier&) = default;

classifier& classifier::operator=(const classifier&) = default;

classifier::~classifier() = default;

bool is_node_loss(const classification& c) noexcept {
  return c.cls == error_class::infrastructure && !c.lost_node.empty();
}

} // namespace tasksup
