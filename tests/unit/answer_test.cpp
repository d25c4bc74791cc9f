#include "tasksup/supervisor/answer.hpp"

#include <boost/json.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace tasksup;

namespace {

std::shared_ptr<const answer_schema> schema_of(std::string_view text) {
  auto s = answer_schema::compile_text(text);
  REQUIRE(s);
  return *s;
}

std::optional<std::string> scanned(const std::vector<std::string>& lines) {
  answer_scanner scan;
  for (auto& l : lines)
    scan.feed(l);
  return scan.last();
}

/// The official JSON-Schema-Test-Suite (Debian's json-schema-test-suite).
const std::filesystem::path suite_dir =
  "/usr/share/json-schema-test-suite/tests/draft7";

/// Keyword files of the suite this build does not support: the answer
/// schema refuses `patternProperties`, and fetches no remote `$ref`.
bool unsupported_file(const std::string& name) {
  return name == "patternProperties.json" || name == "refRemote.json";
}

/// Test groups of supported keyword files whose schema names an unsupported
/// feature (`patternProperties` beside another keyword, a `$ref` to another
/// document, directly or through an `$id`): the schema must then be
/// refused, never checked wrongly.
bool uses_unsupported(const boost::json::value& schema) {
  auto text = boost::json::serialize(schema);
  return text.find("patternProperties") != std::string::npos ||
         text.find("\"$ref\":\"http") != std::string::npos ||
         text.find("\"$id\":\"http") != std::string::npos;
}

} // namespace

TEST_CASE("the last fenced json block of the output is the answer",
          "[answer]") {
  CHECK(scanned({"thinking...", "```json", "{\"a\": 1}", "```", "more text",
                 "```JSON", "{\"a\": 2,", " \"b\": [1]}", "```", "bye"}) ==
        "{\"a\": 2,\n \"b\": [1]}\n");
  // Indented fences, CRLF line ends.
  CHECK(scanned({"  ```json\r", "  [1, 2]\r", "  ```\r"}) == "  [1, 2]\r\n");
  // No block, an unclosed block, a block of another language.
  CHECK_FALSE(scanned({"{\"a\": 1}"}));
  CHECK_FALSE(scanned({"```json", "{\"a\": 1}"}));
  CHECK_FALSE(scanned({"```python", "x = 1", "```"}));
  // An unclosed block does not swallow the one before it.
  CHECK(scanned({"```json", "1", "```", "```json", "2"}) == "1\n");
}

TEST_CASE("a block larger than the bound is no answer", "[answer]") {
  std::string line(64 * 1024, 'x');
  std::vector<std::string> lines{"```json", "{\"ok\": true}", "```", "```json"};
  for (int i = 0; i < 5; ++i)
    lines.push_back(line);
  lines.emplace_back("```");
  // The earlier, small block stays the answer.
  CHECK(scanned(lines) == "{\"ok\": true}\n");
}

TEST_CASE("a CLI's final message is the answer when it is JSON", "[answer]") {
  CHECK(answer_in_message("  {\"plan\": \"x\"}\n") == "{\"plan\": \"x\"}");
  CHECK(answer_in_message("[1,2]") == "[1,2]");
  CHECK(answer_in_message("Here is the plan:\n```json\n{\"plan\": \"y\"}\n"
                          "```\nDone.") == "{\"plan\": \"y\"}\n");
  CHECK_FALSE(answer_in_message("{not json"));
  CHECK_FALSE(answer_in_message("All done."));
}

TEST_CASE("an answer is checked against its schema, errors by pointer",
          "[answer]") {
  auto s = schema_of(R"({"type": "object", "required": ["plan", "files"],
    "properties": {"plan": {"type": "string", "minLength": 3},
                   "files": {"type": "array", "items": {"type": "string"}}},
    "additionalProperties": false})");
  auto ok = s->check(std::string{"{\"plan\": \"fix it\", \"files\": []}"});
  CHECK(ok.ok);
  CHECK(ok.answer == R"({"plan":"fix it","files":[]})");
  CHECK(ok.errors.empty());

  auto bad = s->check(std::string{R"({"plan": "x", "files": [1], "z": 0})"});
  CHECK_FALSE(bad.ok);
  auto has = [&](std::string_view prefix) {
    for (auto& e : bad.errors)
      if (e.rfind(prefix, 0) == 0)
        return true;
    return false;
  };
  CHECK(has("/plan: "));
  CHECK(has("/files/0: "));
  CHECK(bad.errors.size() <= max_answer_errors);

  auto missing = s->check(std::nullopt);
  CHECK_FALSE(missing.ok);
  REQUIRE(missing.errors.size() == 1);
  CHECK(missing.errors[0].rfind("no answer", 0) == 0);

  auto garbled = s->check(std::string{"{\"plan\": "});
  CHECK_FALSE(garbled.ok);
  CHECK(garbled.errors.at(0).rfind("the answer is not JSON", 0) == 0);
  CHECK(s->declares("plan"));
  CHECK_FALSE(s->declares("nope"));
}

TEST_CASE("a schema that is not valid JSON Schema is refused, by pointer",
          "[answer]") {
  auto refused = [](std::string_view text) {
    auto s = answer_schema::compile_text(text);
    REQUIRE_FALSE(s);
    return s.error();
  };
  CHECK(refused(R"({"type": 5})").what.find("not a valid JSON Schema") !=
        std::string::npos);
  CHECK(refused(R"({"minLength": -1})").what.find("minLength") !=
        std::string::npos);
  CHECK(refused(R"([])").what.find("object or a boolean") != std::string::npos);
  CHECK(refused(R"({"$ref": "http://example.com/s.json"})")
          .what.find("within the schema") != std::string::npos);
  auto re = refused(R"({"properties": {"a": {"pattern": "(x"}}})");
  CHECK(re.path == "/properties/a/pattern");
  auto pp = refused(R"({"patternProperties": {"^a": {}}})");
  CHECK(pp.path == "/patternProperties");
  CHECK_FALSE(answer_schema::compile_text("{nope"));
}

TEST_CASE("patterns are matched in linear time on long strings", "[answer]") {
  // std::regex overflows its stack on such a string; RE2 does not.
  auto s = schema_of(R"({"type": "string", "pattern": "^(a|b)+$"})");
  std::string long_a(200 * 1024, 'a');
  CHECK(s->check("\"" + long_a + "\"").ok);
  auto nested = schema_of(R"({"type": "string", "pattern": "^(a*)*b$"})");
  CHECK_FALSE(nested->check("\"" + std::string(5000, 'a') + "c\"").ok);
  // A property named "pattern" is a name, not the keyword.
  auto named = schema_of(R"({"properties": {"pattern": {"type": "integer"}},
                             "required": ["pattern"]})");
  CHECK(named->check(std::string{"{\"pattern\": 3}"}).ok);
  CHECK_FALSE(named->check(std::string{"{\"pattern\": \"3\"}"}).ok);
  // enum values are data.
  auto data = schema_of(R"({"enum": [{"pattern": "(x"}]})");
  CHECK(data->check(std::string{"{\"pattern\": \"(x\"}"}).ok);
}

TEST_CASE("a template's field is the answer's top-level field", "[answer]") {
  std::string a = R"({"plan": "do x", "files": ["a.c"], "n": 3})";
  CHECK(answer_field(a, "plan") == "do x");
  CHECK(answer_field(a, "files") == R"(["a.c"])");
  CHECK(answer_field(a, "n") == "3");
  CHECK_FALSE(answer_field(a, "nope"));
  CHECK_FALSE(answer_field("[1]", "plan"));
}

TEST_CASE("the validator passes the official JSON-Schema-Test-Suite for "
          "every keyword supported",
          "[answer]") {
  REQUIRE(std::filesystem::is_directory(suite_dir));
  std::size_t files = 0, checked = 0;
  std::vector<std::string> failures;
  for (auto& entry : std::filesystem::directory_iterator{suite_dir}) {
    auto name = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() != ".json" ||
        unsupported_file(name))
      continue;
    ++files;
    std::ifstream in{entry.path()};
    std::stringstream text;
    text << in.rdbuf();
    auto groups = boost::json::parse(text.str()).as_array();
    for (auto& g : groups) {
      auto& group = g.as_object();
      auto what =
        name + ": " + std::string{group.at("description").as_string()};
      auto schema = answer_schema::compile(group.at("schema"));
      if (uses_unsupported(group.at("schema"))) {
        if (schema)
          failures.push_back(what + ": an unsupported schema was accepted");
        continue;
      }
      if (!schema) {
        failures.push_back(what + ": refused: " + schema.error().to_string());
        continue;
      }
      for (auto& t : group.at("tests").as_array()) {
        auto& test = t.as_object();
        auto verdict =
          (*schema)->check(boost::json::serialize(test.at("data")));
        ++checked;
        if (verdict.ok != test.at("valid").as_bool())
          failures.push_back(what + " / " +
                             std::string{test.at("description").as_string()});
      }
    }
  }
  INFO(files << " keyword files, " << checked << " cases");
  CHECK(files >= 33);
  CHECK(checked >= 350);
  for (auto& f : failures)
    UNSCOPED_INFO(f);
  CHECK(failures.empty());
}
