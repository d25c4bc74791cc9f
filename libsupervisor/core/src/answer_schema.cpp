// answer_schema: JSON Schema (draft 7) with valijson. valijson is header
// only and compiled here alone, with exceptions on (its parser reports a bad
// schema by throwing).
//
// valijson matches `pattern` (and checks `format`) with std::regex, whose
// matcher recurses once per character: a 32 KiB string from an agent
// overflows the stack, and some patterns take exponential time. So no
// schema reaches valijson with either keyword: `pattern` is renamed to a
// keyword of ours, matched with RE2 (linear time), `format` is renamed to
// one nobody reads, and `patternProperties` is refused.
#define VALIJSON_USE_EXCEPTIONS 1

#include "tasksup/supervisor/answer.hpp"

#include "config_reader.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <re2/re2.h>
#include <valijson/adapters/boost_json_adapter.hpp>
#include <valijson/constraint_builder.hpp>
#include <valijson/schema.hpp>
#include <valijson/schema_parser.hpp>
#include <valijson/validation_results.hpp>
#include <valijson/validator.hpp>

#include <algorithm>
#include <array>
#include <new>
#include <stdexcept>

namespace tasksup {

namespace {

/// Where a schema's `pattern` goes, matched by `re2_pattern`.
constexpr std::string_view pattern_keyword = "x-tasksup-pattern";

/// Where a schema's `format` goes: unread, as draft 7 allows.
constexpr std::string_view format_keyword = "x-tasksup-format";

RE2::Options pattern_options() {
  RE2::Options opts;
  opts.set_log_errors(false);
  // An answer is checked whole; the program stays small for any pattern.
  opts.set_max_mem(8 << 20);
  return opts;
}

/// `pattern`, matched with RE2 anywhere in the string (as draft 7 says:
/// patterns are not anchored).
class re2_pattern final : public valijson::constraints::PolyConstraint {
public:
  explicit re2_pattern(std::shared_ptr<const RE2> re) : re_(std::move(re)) {}

  bool validate(const valijson::adapters::Adapter& target,
                const std::vector<std::string>& context,
                valijson::ValidationResults* results) const override {
    if (!target.isString())
      return true;
    if (RE2::PartialMatch(target.asString(), *re_))
      return true;
    if (results != nullptr)
      results->pushError(context, "does not match the pattern \"" +
                                    re_->pattern() + "\"");
    return false;
  }

private:
  Constraint* cloneInto(void* at) const override {
    return new (at) re2_pattern(*this);
  }

  std::size_t sizeOf() const override { return sizeof(re2_pattern); }

  std::shared_ptr<const RE2> re_;
};

class re2_pattern_builder final : public valijson::ConstraintBuilder {
public:
  valijson::constraints::Constraint*
  make(const valijson::adapters::Adapter& value) const override {
    std::string text;
    if (!value.getString(text))
      throw std::runtime_error("a pattern must be a string");
    auto re = std::make_shared<const RE2>(text, pattern_options());
    if (!re->ok())
      throw std::runtime_error("not a pattern RE2 accepts: " + re->error());
    return new re2_pattern(std::move(re));
  }
};

/// Keywords whose value is data, never a schema.
bool data_keyword(std::string_view k) {
  return k == "enum" || k == "const" || k == "default" || k == "examples";
}

/// Keywords whose value maps names to schemas.
bool map_keyword(std::string_view k) {
  return k == "properties" || k == "definitions" || k == "dependencies";
}

/// `schema` as valijson may read it (see the top of this file); throws
/// tasksup::error naming the pointer of a keyword refused.
boost::json::value rewritten(const boost::json::value& schema,
                             const std::string& at) {
  if (schema.is_array()) {
    boost::json::array out;
    std::size_t i = 0;
    for (auto& x : schema.get_array())
      out.push_back(rewritten(x, detail::child(at, i++)));
    return out;
  }
  if (!schema.is_object())
    return schema;
  boost::json::object out;
  for (auto& [key, x] : schema.get_object()) {
    auto path = detail::child(at, key);
    if (key == "patternProperties")
      throw error{"", path,
                  "patternProperties is not supported in an answer schema "
                  "(name the properties, or use propertyNames with a "
                  "pattern)"};
    if (key == "pattern" && x.is_string()) {
      RE2 re{std::string{x.get_string()}, pattern_options()};
      if (!re.ok())
        throw error{"", path, "not a pattern RE2 accepts: " + re.error()};
      out[pattern_keyword] = x;
    } else if (key == "format") {
      out[format_keyword] = x;
    } else if (data_keyword(key)) {
      out[key] = x;
    } else if (map_keyword(key) && x.is_object()) {
      boost::json::object m;
      for (auto& [name, sub] : x.get_object())
        m[name] = rewritten(sub, detail::child(path, name));
      out[key] = std::move(m);
    } else {
      out[key] = rewritten(x, path);
    }
  }
  return out;
}

/// valijson's context (`<root>`, `[plan]`, `[0]`) as a JSON pointer.
std::string pointer_of(const std::vector<std::string>& context) {
  std::string out;
  for (auto& part : context) {
    if (part == "<root>")
      continue;
    auto name = std::string_view{part};
    if (name.size() >= 2 && name.front() == '[' && name.back() == ']')
      name = name.substr(1, name.size() - 2);
    detail::append_pointer_token(out, name);
  }
  return out.empty() ? "/" : out;
}

} // namespace

struct answer_schema::impl {
  valijson::Schema schema;
  std::vector<std::string> fields;
};

answer_schema::answer_schema(std::unique_ptr<impl> x) : impl_(std::move(x)) {}

answer_schema::~answer_schema() = default;

expected<std::shared_ptr<const answer_schema>>
answer_schema::compile(const boost::json::value& schema) {
  if (!schema.is_object() && !schema.is_bool())
    return error{"", "", "a JSON Schema is an object or a boolean"};
  auto x = std::make_unique<impl>();
  try {
    auto doc = rewritten(schema, "");
    valijson::SchemaParser parser{valijson::SchemaParser::kDraft7};
    // The parser owns (and deletes) its builders.
    parser.addConstraintBuilder(std::string{pattern_keyword},
                                new re2_pattern_builder);
    valijson::adapters::BoostJsonAdapter adapter{doc};
    parser.populateSchema(adapter, x->schema);
  } catch (const error& e) {
    return e;
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (what.find("remote JSON References") != std::string::npos)
      what = "a $ref must point within the schema (\"#...\")";
    return error{"", "", "not a valid JSON Schema: " + what};
  }
  if (schema.is_object())
    if (const auto* props = schema.get_object().if_contains("properties");
        props != nullptr && props->is_object())
      for (auto& [name, sub] : props->get_object())
        x->fields.emplace_back(name);
  return std::shared_ptr<const answer_schema>{new answer_schema(std::move(x))};
}

expected<std::shared_ptr<const answer_schema>>
answer_schema::compile_text(std::string_view text) {
  boost::system::error_code ec;
  auto doc = boost::json::parse(text, ec);
  if (ec)
    return error{"", "", "not JSON: " + ec.message()};
  return compile(doc);
}

answer_verdict
answer_schema::check(const std::optional<std::string>& answer) const {
  answer_verdict v;
  if (!answer) {
    v.errors.emplace_back("no answer: the output ends with no JSON answer "
                          "(a final ```json block, or a final message that "
                          "is a JSON document)");
    return v;
  }
  boost::system::error_code ec;
  auto doc = boost::json::parse(*answer, ec);
  if (ec) {
    v.errors.emplace_back("the answer is not JSON: " + ec.message());
    return v;
  }
  v.answer = boost::json::serialize(doc);
  valijson::Validator validator;
  valijson::ValidationResults results;
  valijson::adapters::BoostJsonAdapter target{doc};
  try {
    v.ok = validator.validate(impl_->schema, target, &results);
  } catch (const std::exception& e) {
    v.ok = false;
    v.errors.emplace_back(std::string{"the answer could not be checked: "} +
                          e.what());
    return v;
  }
  valijson::ValidationResults::Error e;
  while (results.popError(e) && v.errors.size() < max_answer_errors)
    v.errors.push_back(pointer_of(e.context) + ": " + e.description);
  if (!v.ok && v.errors.empty())
    v.errors.emplace_back("/: the answer does not match the schema");
  return v;
}

bool answer_schema::declares(std::string_view field) const {
  return std::find(impl_->fields.begin(), impl_->fields.end(), field) !=
         impl_->fields.end();
}

} // namespace tasksup
