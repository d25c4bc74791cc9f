// The HTTP request parser of the metrics and dashboard server: what it
// accepts, and the status code for each way a hostile client can break it.

#include "http_request.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

using namespace tasksup::app;

namespace {

http_parse_result parse(const std::string& text, http_request& req,
                        const http_limits& limits = {}) {
  return parse_http_request(text, limits, req);
}

int error_of(const std::string& text, const http_limits& limits = {}) {
  http_request req;
  auto r = parse(text, req, limits);
  return r.status == http_parse_status::error ? r.error_code : 0;
}

} // namespace

TEST_CASE("a GET request is parsed: method, path, query, headers") {
  http_request req;
  std::string text = "GET /api/agents?window=3600&x=a%20b HTTP/1.1\r\n"
                     "Host: 127.0.0.1:7421\r\n"
                     "User-Agent:  curl/7 \r\n"
                     "\r\n";
  auto r = parse(text, req);
  REQUIRE(r.status == http_parse_status::complete);
  CHECK(r.consumed == text.size());
  CHECK(req.method == "GET");
  CHECK(req.path == "/api/agents");
  CHECK(req.query_param("window") == std::optional<std::string>{"3600"});
  CHECK(req.query_param("x") == std::optional<std::string>{"a b"});
  CHECK_FALSE(req.query_param("y"));
  REQUIRE(req.header("host"));
  CHECK(*req.header("host") == "127.0.0.1:7421");
  CHECK(*req.header("user-agent") == "curl/7");
}

TEST_CASE("a request is incomplete until its header section and body are in") {
  std::string text = "POST /api/tasks/t%2F1/stop HTTP/1.1\r\nHost: x\r\n"
                     "Content-Length: 5\r\n\r\nhello";
  for (std::size_t n = 0; n < text.size(); ++n) {
    http_request req;
    INFO("prefix of " << n << " bytes");
    CHECK(parse(text.substr(0, n), req).status ==
          http_parse_status::incomplete);
  }
  http_request req;
  auto r = parse(text + "GET / HTTP/1.1\r\n", req);
  REQUIRE(r.status == http_parse_status::complete);
  CHECK(r.consumed == text.size());
  CHECK(req.body == "hello");
  CHECK(req.path == "/api/tasks/t/1/stop");
}

TEST_CASE("HTTP/1.0 needs no Host, HTTP/1.1 does") {
  http_request req;
  CHECK(parse("GET /metrics HTTP/1.0\r\n\r\n", req).status ==
        http_parse_status::complete);
  CHECK(error_of("GET /metrics HTTP/1.1\r\n\r\n") == 400);
}

TEST_CASE("malformed requests are answered 400") {
  CHECK(error_of("GARBAGE\r\n\r\n") == 400);
  CHECK(error_of("GET  / HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1 extra\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("G(T / HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET http://evil/ HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET /a\x01 HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET /%zz HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET /%00 HTTP/1.1\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost x\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nBad Name: x\r\nHost: x\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: a\x02"
                 "b\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n") ==
        400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                 "Content-Length: 2\r\n\r\n") == 400);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: "
                 "99999999999999999999\r\n\r\n") == 400);
}

TEST_CASE("unsupported versions and encodings get 505 and 501") {
  CHECK(error_of("GET / HTTP/2.0\r\nHost: x\r\n\r\n") == 505);
  CHECK(error_of("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked"
                 "\r\n\r\n") == 501);
}

TEST_CASE("sizes beyond the limits get 414, 431 and 413, before the rest "
          "arrives") {
  http_limits lim;
  lim.max_request_line = 64;
  lim.max_header_bytes = 128;
  lim.max_headers = 3;
  lim.max_body = 10;
  // A request line that never ends is refused once it passes the limit.
  CHECK(error_of("GET /" + std::string(100, 'a'), lim) == 414);
  CHECK(error_of("GET /" + std::string(100, 'a') + " HTTP/1.1\r\n", lim) ==
        414);
  // A header section that never ends, likewise.
  CHECK(error_of("GET / HTTP/1.1\r\nX: " + std::string(200, 'b'), lim) == 431);
  CHECK(error_of("GET / HTTP/1.1\r\nHost: x\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n",
                 lim) == 431);
  CHECK(error_of("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\n",
                 lim) == 413);
  // Exactly at the limits is fine.
  http_request req;
  CHECK(parse("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\n"
              "0123456789",
              req, lim)
          .status == http_parse_status::complete);
}

TEST_CASE("random bytes never crash the parser or overrun the buffer") {
  std::uint64_t state = 7;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  const std::string pieces[] = {
    "GET ", "POST ",    "/", " HTTP/1.1",         "\r\n", "Host: x", ":",
    " ",    "\r\n\r\n", "%", "Content-Length: 3", "\t",   "a",       "\x00",
    "\xff"};
  http_limits lim;
  lim.max_request_line = 200;
  lim.max_header_bytes = 300;
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    auto n = next() % 20;
    for (std::uint64_t i = 0; i < n; ++i)
      text += next() % 5 == 0 ? std::string(1, static_cast<char>(next()))
                              : pieces[next() % std::size(pieces)];
    http_request req;
    auto r = parse_http_request(text, lim, req);
    if (r.status == http_parse_status::complete)
      CHECK(r.consumed <= text.size());
    if (r.status == http_parse_status::error)
      CHECK(r.error_code >= 400);
  }
}

TEST_CASE("percent-decoding refuses malformed escapes") {
  CHECK(percent_decode("a%2Fb") == std::optional<std::string>{"a/b"});
  CHECK(percent_decode("a+b", true) == std::optional<std::string>{"a b"});
  CHECK(percent_decode("a+b") == std::optional<std::string>{"a+b"});
  CHECK_FALSE(percent_decode("%"));
  CHECK_FALSE(percent_decode("%4"));
  CHECK_FALSE(percent_decode("%g0"));
}

TEST_CASE("responses carry length, type and close the connection") {
  auto r = text_response(404, "not found: /x");
  r.headers.emplace_back("Allow", "GET");
  auto text = serialize_response(r, false);
  CHECK(text.rfind("HTTP/1.1 404 Not Found\r\n", 0) == 0);
  CHECK(text.find("\r\nContent-Length: 14\r\n") != std::string::npos);
  CHECK(text.find("\r\nConnection: close\r\n") != std::string::npos);
  CHECK(text.find("\r\nAllow: GET\r\n") != std::string::npos);
  CHECK(text.substr(text.size() - 14) == "not found: /x\n");
  auto head = serialize_response(r, true);
  CHECK(head.find("Content-Length: 14") != std::string::npos);
  CHECK(head.substr(head.size() - 4) == "\r\n\r\n");
}
