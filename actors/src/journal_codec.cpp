#include "tasksup/actors/journal_codec.hpp"

#include "tasksup/actors/inspect.hpp"

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>

#include <cmath>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace tasksup {

namespace detail {

template<>
struct enum_size<timer_kind> : std::integral_constant<std::size_t, 4> {};

template<>
struct enum_size<stop_request> : std::integral_constant<std::size_t, 3> {};

template<>
struct enum_size<request_kind> : std::integral_constant<std::size_t, 4> {};

template<>
struct enum_size<journaled_group_input::kind_t>
  : std::integral_constant<std::size_t, 6> {};

} // namespace detail

namespace input {

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, start&) {
  return f(caf::meta::type_name("start"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, permission& x) {
  return f(caf::meta::type_name("permission"), x.generation, x.agent_allowed,
           x.token, x.agent_id, caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.agent_id, wire::max_id_bytes, "permission.agent_id"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_started& x) {
  return f(caf::meta::type_name("attempt_started"), x.attempt, x.runtime_id,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes({{x.runtime_id, wire::max_id_bytes,
                                          "attempt_started.runtime_id"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempt_ended& x) {
  return f(caf::meta::type_name("attempt_ended"), x.attempt, x.outcome,
           x.not_started, x.permanent, x.done_file);
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, classified& x) {
  return f(caf::meta::type_name("classified"), x.generation, x.result);
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, delay_decided& x) {
  return f(caf::meta::type_name("delay_decided"), x.generation, x.delay);
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, timer& x) {
  return f(caf::meta::type_name("timer"), detail::checked(x.kind, "timer.kind"),
           x.generation);
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, stop& x) {
  return f(caf::meta::type_name("stop"), detail::checked(x.mode, "stop.mode"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, retry_now&) {
  return f(caf::meta::type_name("retry_now"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, force_fallback&) {
  return f(caf::meta::type_name("force_fallback"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, reply_failed& x) {
  return f(caf::meta::type_name("reply_failed"), x.generation,
           detail::checked(x.request, "reply_failed.request"), x.error,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.error, wire::max_text_bytes, "reply_failed.error"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, preflight_done& x) {
  return f(caf::meta::type_name("preflight_done"), x.attempt, x.passed,
           x.exit_code, x.timed_out, x.detail,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.detail, wire::max_text_bytes, "preflight_done.detail"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, gates_done& x) {
  return f(caf::meta::type_name("gates_done"), x.attempt, x.passed, x.gate,
           x.exit_code, x.timed_out, x.detail,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.gate, wire::max_id_bytes, "gates_done.gate"},
                {x.detail, wire::max_text_bytes, "gates_done.detail"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, answer_checked& x) {
  return f(caf::meta::type_name("answer_checked"), x.attempt, x.ok, x.answer,
           x.errors, caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.answer, max_answer_bytes, "answer_checked.answer"},
                {x.errors, wire::max_text_bytes, "answer_checked.errors"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, delivered& x) {
  return f(caf::meta::type_name("delivered"), x.attempt, x.ok, x.detail,
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.detail, wire::max_text_bytes, "delivered.detail"}});
           }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, resumed&) {
  return f(caf::meta::type_name("resumed"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, pause&) {
  return f(caf::meta::type_name("pause"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, resume&) {
  return f(caf::meta::type_name("resume"));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, quota_closed& x) {
  return f(caf::meta::type_name("quota_closed"), x.generation, x.account,
           detail::finite(x.resume_at_s, "quota_closed.resume_at_s"),
           caf::meta::load_callback([&]() -> caf::error {
             return detail::check_sizes(
               {{x.account, wire::max_id_bytes, "quota_closed.account"}});
           }));
}

} // namespace input

/// A task as journals wrote it before tasks had an answer schema and a
/// role.
struct plain_spec_view {
  task_spec& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, plain_spec_view& v) {
  return detail::inspect_spec(f, v.x);
}

/// A task record as journals wrote it before a record said its first
/// attempt number (it starts at 1).
struct first_task_view {
  journaled_task& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, first_task_view& v) {
  auto& x = v.x;
  plain_spec_view spec{x.spec};
  return f(caf::meta::type_name("journaled_task"), spec, x.trace_id, x.seed,
           detail::opt(x.start_agent_id));
}

/// The attempts before must be a count.
caf::error check_attempts_before(const journaled_task& x) {
  if (x.attempts_before < 0)
    return detail::wire_error("journaled_task.attempts_before", "negative");
  return caf::none;
}

/// A task record as journals wrote it before a record said a group
/// member's run (`member_run` 0).
struct attempts_task_view {
  journaled_task& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, attempts_task_view& v) {
  auto& x = v.x;
  plain_spec_view spec{x.spec};
  return f(caf::meta::type_name("journaled_task"), spec, x.trace_id, x.seed,
           detail::opt(x.start_agent_id), x.attempts_before,
           caf::meta::load_callback([&] { return check_attempts_before(x); }));
}

/// The member run must be a count.
caf::error check_member_run(const journaled_task& x) {
  if (auto err = check_attempts_before(x))
    return err;
  if (x.member_run < 0)
    return detail::wire_error("journaled_task.member_run", "negative");
  return caf::none;
}

/// A task record as journals wrote it before tasks had an answer schema
/// and a role.
struct run_task_view {
  journaled_task& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, run_task_view& v) {
  auto& x = v.x;
  plain_spec_view spec{x.spec};
  return f(caf::meta::type_name("journaled_task"), spec, x.trace_id, x.seed,
           detail::opt(x.start_agent_id), x.attempts_before, x.member_run,
           caf::meta::load_callback([&] { return check_member_run(x); }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, journaled_task& x) {
  return f(caf::meta::type_name("journaled_task"), x.spec, x.trace_id, x.seed,
           detail::opt(x.start_agent_id), x.attempts_before, x.member_run,
           caf::meta::load_callback([&] { return check_member_run(x); }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, journaled_group& x) {
  return f(
    caf::meta::type_name("journaled_group"), x.top, x.document, x.trace_id,
    x.seed, caf::meta::load_callback([&]() -> caf::error {
      return detail::check_sizes(
        {{x.top, wire::max_id_bytes, "journaled_group.top"},
         {x.document, wire::max_task_json_bytes, "journaled_group.document"},
         {x.trace_id, wire::max_id_bytes, "journaled_group.trace_id"}});
    }));
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f,
                                        journaled_group_input& x) {
  return f(caf::meta::type_name("journaled_group_input"),
           detail::checked(x.kind, "journaled_group_input.kind"), x.at_s,
           x.member, detail::checked(x.how, "journaled_group_input.how"),
           x.run);
}

/// A result as journals wrote it before results carried their cause
/// (`task_result::cause`): the same fields, without it or the answer.
struct legacy_result_view {
  task_result& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, legacy_result_view& v) {
  return detail::inspect_result(f, v.x);
}

/// A result as journals wrote it before results carried an answer.
struct cause_result_view {
  task_result& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, cause_result_view& v) {
  return detail::inspect_result(f, v.x, v.x.cause);
}

/// An optional result read as `View`.
template<class View>
auto opt_result(std::optional<task_result>& x) {
  auto wrap = [](task_result& r) { return View{r}; };
  return detail::opt_ref<task_result, decltype(wrap)>{x, wrap};
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, journaled_group_end& x) {
  return f(caf::meta::type_name("journaled_group_end"), detail::opt(x.result),
           x.restarts);
}

/// A group's end as journals wrote it before results carried an answer.
struct cause_group_end_view {
  journaled_group_end& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, cause_group_end_view& v) {
  auto result = opt_result<cause_result_view>(v.x.result);
  return f(caf::meta::type_name("journaled_group_end"), result, v.x.restarts);
}

namespace {

// -- the state, saved only (for fingerprints) --------------------------------

template<class Inspector>
typename Inspector::result_type save_window(Inspector& f,
                                            const restart_window& w) {
  auto times = w.recorded();
  auto max = w.max_restarts();
  auto period = w.period_s();
  return f(max, period, times);
}

template<class Inspector>
typename Inspector::result_type save_decision(Inspector& f, decision& d) {
  return f(d.step, d.cause, d.rule, d.limit, d.cls, detail::opt(d.classified),
           d.count, d.count_max, d.retry_count, d.backoff_class.has_value(),
           d.backoff_class.value_or(error_class::retryable), d.agent_index,
           d.chain_size, d.restarts, d.reset_retries, d.agent_id, d.at_s,
           d.resume_at_s);
}

struct state_view {
  const task_machine_state& st;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_view& v) {
  static_assert(!Inspector::writes_state);
  auto& s = const_cast<task_machine_state&>(v.st);
  auto& c = s.counters;
  if (auto err = f(s.phase, c.agent_index, c.chain_size, c.retry_count,
                   c.total_retries, c.total_attempts, c.fallback_count,
                   c.crash_restarts, c.retries_by_agent, c.retries_by_class))
    return err;
  if (auto err = save_window(f, c.restarts))
    return err;
  if (auto err =
        f(s.generation, s.attempt, s.holds_slot, s.stop, s.fallback_requested,
          s.deadline_passed, s.timed_out, s.voluntary, s.restart_streak))
    return err;
  for (auto* d : {&s.plan, &s.ending}) {
    auto present = d->has_value();
    if (auto err = f(present))
      return err;
    if (present)
      if (auto err = save_decision(f, **d))
        return err;
  }
  // The same bytes as when `ended` was a std::optional.
  std::optional<attempt_outcome> ended;
  if (s.ended)
    ended = *s.ended;
  return f(detail::opt(ended), s.previous_delay_s, s.started_at_s, s.retry_at_s,
           detail::opt(s.last_exit_code), s.last_artifacts, s.last_not_started,
           detail::opt(s.usage), detail::opt(s.cost_usd), s.resume_at_s,
           s.paused);
}

/// A finished task's status as journals wrote it before results carried
/// their cause. Read only: such a result's cause is derived on load.
struct legacy_status_view {
  task_status& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, legacy_status_view& v) {
  static_assert(Inspector::writes_state, "the legacy status is only read");
  auto& x = v.x;
  auto result = opt_result<legacy_result_view>(x.result);
  return detail::inspect_status(f, x, result);
}

/// A finished task's status as journals wrote it before results carried an
/// answer.
struct cause_status_view {
  task_status& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, cause_status_view& v) {
  auto result = opt_result<cause_result_view>(v.x.result);
  return detail::inspect_status(f, v.x, result);
}

/// A finished task's status as the journal keeps it: everything `status`
/// answers but a group's tree (answered live, never journaled).
struct journal_status_view {
  task_status& x;
};

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, journal_status_view& v) {
  return detail::inspect_status(f, v.x, detail::opt(v.x.result));
}

/// The first byte of a status record whose result carries its cause. A
/// record without it starts with the task id's length (1 to 64, one byte),
/// so the two never mix up.
constexpr char status_with_cause = '\xff';

/// The first byte of a task record that says its attempts before (a group
/// member's rerun). A record without it starts with the task id's length,
/// as a status record without its cause.
constexpr char task_with_first_attempt = '\xfe';

/// The first byte of a task record that also says its member run.
constexpr char task_with_member_run = '\xfc';

/// The first byte of a task record whose task may have an answer schema
/// and a role: what this build writes.
constexpr char task_with_answer_schema = '\xfb';

/// The first byte of a status record whose result may carry an answer:
/// what this build writes.
constexpr char status_with_answer = '\xfa';

/// The first byte of a group's end whose result may carry an answer: what
/// this build writes. An older end starts with its result's presence (0
/// or 1).
constexpr char group_end_with_answer = '\xf9';

/// The first byte of a group's row (`journaled_group`).
constexpr char group_row_tag = '\xfd';

struct input_view {
  journaled_input& x;
};

/// Makes alternative `I` of `x` the one in place and reads it, when `tag`
/// names it.
template<std::size_t I, class Inspector>
caf::error load_alternative(Inspector& f, machine_input& x, std::uint8_t tag) {
  if (tag != I)
    return caf::none;
  return f(x.template emplace<I>());
}

template<class Inspector, std::size_t... Is>
caf::error load_input(Inspector& f, machine_input& x, std::uint8_t tag,
                      std::index_sequence<Is...>) {
  caf::error err;
  ((err = err ? std::move(err) : load_alternative<Is>(f, x, tag)), ...);
  return err;
}

template<class Inspector>
typename Inspector::result_type inspect(Inspector& f, input_view& v) {
  auto& x = v.x;
  constexpr auto alternatives = std::variant_size_v<machine_input>;
  if constexpr (Inspector::writes_state) {
    std::uint8_t tag = 0;
    if (auto err = f(x.at_s, tag))
      return err;
    if (tag >= alternatives)
      return detail::wire_error("journaled_input.kind",
                                "out-of-range value " + std::to_string(tag));
    return load_input(f, x.in, tag, std::make_index_sequence<alternatives>{});
  } else {
    auto tag = static_cast<std::uint8_t>(x.in.index());
    if (auto err = f(x.at_s, tag))
      return err;
    return std::visit([&](auto& alt) { return f(alt); }, x.in);
  }
}

/// A number as the journal keeps it: finite and within
/// `wire::max_number` of zero (NaN is 0, an infinity the bound on its side).
/// Everything that enters the node is bounded already; this is the one
/// place that makes sure no other number reaches CAF's float encoder, which
/// does not end on an infinity.
template<class Float>
bool clamp_to_journal(Float& x) {
  auto lo = static_cast<Float>(-wire::max_number);
  auto hi = static_cast<Float>(wire::max_number);
  if (std::isnan(x))
    x = 0;
  else if (x < lo)
    x = lo;
  else if (x > hi)
    x = hi;
  else
    return false;
  return true;
}

/// CAF's binary writer (`Base` caf::serializer) or reader (`Base`
/// caf::deserializer) with every number bounded like `clamp_to_journal`: a
/// number is written bounded, so that saving always ends, and read bounded,
/// since a journal written by an older build may hold one that is not
/// finite, or one so large that a sum of two is not. `clamped` counts the
/// numbers that were, for a warning that names the task.
template<class Base, class Inner>
class bounded_numbers final : public Base, public detail::clamps_numbers {
public:
  template<class... Ts>
  explicit bounded_numbers(Ts&&... xs) : inner_(nullptr, xs...) {
    // nop
  }

  std::size_t clamped() const noexcept { return clamped_; }

  const Inner& inner() const noexcept { return inner_; }

  caf::error begin_object(std::uint16_t& nr, std::string& name) override {
    return inner_.begin_object(nr, name);
  }

  caf::error end_object() override { return inner_.end_object(); }

  caf::error begin_sequence(std::size_t& size) override {
    return inner_.begin_sequence(size);
  }

  caf::error end_sequence() override { return inner_.end_sequence(); }

  caf::error apply_raw(std::size_t n, void* data) override {
    return inner_.apply_raw(n, data);
  }

protected:
  caf::error apply_impl(std::int8_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::uint8_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::int16_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::uint16_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::int32_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::uint32_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::int64_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::uint64_t& x) override { return inner_.apply(x); }

  caf::error apply_impl(float& x) override { return bounded(x); }

  caf::error apply_impl(double& x) override { return bounded(x); }

  caf::error apply_impl(long double& x) override { return bounded(x); }

  caf::error apply_impl(std::string& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::u16string& x) override { return inner_.apply(x); }

  caf::error apply_impl(std::u32string& x) override { return inner_.apply(x); }

private:
  template<class Float>
  caf::error bounded(Float& x) {
    if constexpr (Base::reads_state) {
      auto copy = x;
      clamped_ += clamp_to_journal(copy) ? 1 : 0;
      return inner_.apply(copy);
    } else {
      if (auto err = inner_.apply(x))
        return err;
      clamped_ += clamp_to_journal(x) ? 1 : 0;
      return caf::none;
    }
  }

  Inner inner_;
  std::size_t clamped_ = 0;
};

using bounded_writer = bounded_numbers<caf::serializer, caf::binary_serializer>;

using bounded_reader =
  bounded_numbers<caf::deserializer, caf::binary_deserializer>;

template<class T>
std::string save(T& x) {
  std::vector<char> buf;
  bounded_writer sink{buf};
  if (auto err = sink(x))
    return {}; // saving in memory cannot fail
  return std::string(buf.begin(), buf.end());
}

/// Reads `x` from all of `bytes`; a number it had to clamp adds a warning
/// naming the record to `warnings`.
template<class T>
expected<bool> load(std::string_view bytes, const std::string& what, T& x,
                    std::vector<std::string>* warnings) {
  bounded_reader source{bytes.data(), bytes.size()};
  if (auto err = source(x))
    return tasksup::error{"journal", "",
                          what + ": unreadable (" + caf::to_string(err) + ")"};
  if (auto n = source.inner().remaining(); n != 0)
    return tasksup::error{"journal", "",
                          what + ": " + std::to_string(n) +
                            " stray bytes at the end"};
  if (auto n = source.clamped(); n != 0 && warnings != nullptr)
    warnings->push_back(
      what + ": " + std::to_string(n) + (n == 1 ? " number" : " numbers") +
      " not finite or beyond " +
      std::to_string(static_cast<long long>(wire::max_number)) + ", clamped");
  return true;
}

/// `T` read from `bytes` through its view `V`.
template<class T, class V = T&>
expected<T> decode_as(std::string_view bytes, const std::string& what,
                      std::vector<std::string>* warnings) {
  T x;
  if constexpr (std::is_same_v<V, T&>) {
    if (auto ok = load(bytes, what, x, warnings); !ok)
      return ok.error();
  } else {
    V view{x};
    if (auto ok = load(bytes, what, view, warnings); !ok)
      return ok.error();
  }
  return x;
}

} // namespace

std::string encode(const journaled_task& x) {
  auto copy = x;
  return task_with_answer_schema + save(copy);
}

std::string encode(const journaled_group& x) {
  auto copy = x;
  return group_row_tag + save(copy);
}

std::string encode(const journaled_group_input& x) {
  auto copy = x;
  return save(copy);
}

std::string encode(const journaled_group_end& x) {
  auto copy = x;
  return group_end_with_answer + save(copy);
}

bool is_group_row(std::string_view bytes) noexcept {
  return !bytes.empty() && bytes.front() == group_row_tag;
}

std::string encode(const journaled_input& x) {
  auto copy = x;
  input_view v{copy};
  return save(v);
}

std::string encode(const task_status& x) {
  auto copy = x;
  journal_status_view v{copy};
  return status_with_answer + save(v);
}

expected<journaled_task> decode_task(std::string_view bytes,
                                     const std::string& what,
                                     std::vector<std::string>* warnings) {
  if (!bytes.empty() && bytes.front() == task_with_answer_schema)
    return decode_as<journaled_task>(bytes.substr(1), what, warnings);
  if (!bytes.empty() && bytes.front() == task_with_member_run)
    return decode_as<journaled_task, run_task_view>(bytes.substr(1), what,
                                                    warnings);
  if (!bytes.empty() && bytes.front() == task_with_first_attempt)
    return decode_as<journaled_task, attempts_task_view>(bytes.substr(1), what,
                                                         warnings);
  return decode_as<journaled_task, first_task_view>(bytes, what, warnings);
}

expected<journaled_group> decode_group(std::string_view bytes,
                                       const std::string& what,
                                       std::vector<std::string>* warnings) {
  if (!is_group_row(bytes))
    return tasksup::error{"journal", "", what + ": not a group's record"};
  return decode_as<journaled_group>(bytes.substr(1), what, warnings);
}

expected<journaled_group_input>
decode_group_input(std::string_view bytes, const std::string& what,
                   std::vector<std::string>* warnings) {
  return decode_as<journaled_group_input>(bytes, what, warnings);
}

expected<journaled_group_end>
decode_group_end(std::string_view bytes, const std::string& what,
                 std::vector<std::string>* warnings) {
  if (!bytes.empty() && bytes.front() == group_end_with_answer)
    return decode_as<journaled_group_end>(bytes.substr(1), what, warnings);
  return decode_as<journaled_group_end, cause_group_end_view>(bytes, what,
                                                              warnings);
}

expected<journaled_input> decode_input(std::string_view bytes,
                                       const std::string& what,
                                       std::vector<std::string>* warnings) {
  return decode_as<journaled_input, input_view>(bytes, what, warnings);
}

expected<task_status> decode_status(std::string_view bytes,
                                    const std::string& what,
                                    std::vector<std::string>* warnings) {
  if (!bytes.empty() && bytes.front() == status_with_answer)
    return decode_as<task_status, journal_status_view>(bytes.substr(1), what,
                                                       warnings);
  if (!bytes.empty() && bytes.front() == status_with_cause)
    return decode_as<task_status, cause_status_view>(bytes.substr(1), what,
                                                     warnings);
  // Written before results carried their cause: a success says so, any
  // other end is not known.
  auto x = decode_as<task_status, legacy_status_view>(bytes, what, warnings);
  if (x && x->result)
    x->result->cause.reason = x->result->outcome == task_outcome::succeeded
                                ? end_reason::succeeded
                                : end_reason::unknown;
  return x;
}

std::string fingerprint(const task_machine_state& st) {
  state_view v{st};
  return save(v);
}

} // namespace tasksup
