#include <catch2/catch.hpp>

#include <string>

#include "scan/evidence.h"

using namespace effectfence::scan;

namespace {

SourceFile file_of(const std::string& path, const std::string& text) {
  SourceFile file{path, *language_of_path(path), text, {}};
  file.masked = mask_source(file.text, file.language);
  return file;
}

std::vector<std::string> kinds(const std::vector<WriteSite>& writes) {
  std::vector<std::string> out;
  for (const auto& w : writes) out.push_back(w.kind);
  return out;
}

}  // namespace

TEST_CASE("writes: HTTP methods, SDK verbs, files and SQL, reads and map deletes are not writes", "[scan][evidence]") {
  const SourceFile f = file_of("a.ts",
                               "await fetch(url, { method: 'POST' });\n"
                               "await axios.put(url, body);\n"
                               "await stripe.charges.create({ amount });\n"
                               "fs.writeFileSync(path, data);\n"
                               "db.run(\"INSERT INTO charges (id) VALUES (?)\");\n"
                               "cache.delete(key);\n"
                               "await fetch(url);\n"
                               "log('POST it later');\n"
                               "res.send(page);\n"
                               "await server.sendLoggingMessage(m);\n"
                               "await extra.sendNotification(n);\n"
                               "server.sendToolListChanged();\n"
                               "crypto.createHash('sha256');\n"
                               "http.createServer(app);\n"
                               "document.createElement('a');\n"
                               "Object.create(null);\n"
                               "this._requestToStreamMapping.delete(id);\n"
                               "controller.enqueue(chunk);\n"
                               "this._createRegisteredTool(t);\n"
                               "this.createToolError(e);\n");
  const auto writes = find_writes(f, 0);
  CHECK(kinds(writes) == std::vector<std::string>{"http POST", "http PUT", "sdk create", "file write", "sql insert"});
  CHECK(writes[0].line == 1);
  CHECK(writes[4].line == 5);
}

TEST_CASE("writes in Go, Python and Rust", "[scan][evidence]") {
  CHECK(kinds(find_writes(file_of("m.go", "req, _ := http.NewRequest(http.MethodPost, u, nil)\nhttp.Post(u, t, b)\n"), 0)) ==
        std::vector<std::string>{"http POST", "http POST"});
  CHECK(kinds(find_writes(file_of("m.py", "requests.post(u)\nsession.delete(u)\nd.get(k)\n"), 0)) ==
        std::vector<std::string>{"http POST", "http DELETE"});
  CHECK(kinds(find_writes(file_of("m.rs", "self.client.post(url).send().await\n"), 0)) ==
        std::vector<std::string>{"http POST"});
}

TEST_CASE("guards count only in code: identifiers and whole header names, never comments or prose", "[scan][evidence]") {
  const SourceFile f = file_of("a.ts",
                               "// idempotencyKey in a comment\n"
                               "const msg = 'send a dedupeKey next time';\n"
                               "const key = deriveIdempotencyKey(order);\n"
                               "headers['Idempotency-Key'] = key;\n"
                               "const request_id = uuid();\n");
  const auto guards = find_guards(f, 0);
  REQUIRE(guards.size() == 3);
  CHECK(guards[0].name == "deriveIdempotencyKey");
  CHECK(guards[0].line == 3);
  CHECK(guards[1].name == "Idempotency-Key");
  CHECK(guards[2].name == "request_id");
}

TEST_CASE("a retry loop around a POST is found, a plain loop or a retry without a write is not", "[scan][evidence]") {
  const SourceFile f = file_of("a.ts",
                               "for (let attempt = 0; attempt < 3; attempt++) {\n"
                               "  const r = await fetch(u, { method: 'POST' });\n"
                               "  if (r.ok) break;\n"
                               "}\n"
                               "for (const item of items) { await axios.post(u, item); }\n"
                               "while (retries-- > 0) { await fetch(u); }\n");
  const auto writes = find_writes(f, 0);
  const auto retries = find_retries_around_writes(f, 0, writes, find_guards(f, 0));
  REQUIRE(retries.size() == 1);
  CHECK(retries[0].line == 1);
  CHECK(retries[0].how == "loop");
  CHECK(retries[0].write.kind == "http POST");
  CHECK(retries[0].write.line == 2);
  CHECK_FALSE(retries[0].guarded);
}

TEST_CASE("retry helpers and Python decorators around writes, with a guard inside noted", "[scan][evidence]") {
  const SourceFile js = file_of("a.js", "await pRetry(() => axios.post(u, body, { headers: { dedupeKey } }), { retries: 5 });\n");
  const auto js_retries = find_retries_around_writes(js, 0, find_writes(js, 0), find_guards(js, 0));
  REQUIRE(js_retries.size() == 1);
  CHECK(js_retries[0].how == "retry helper");
  CHECK(js_retries[0].guarded);

  const SourceFile py = file_of("a.py",
                                "@retry(stop=stop_after_attempt(3))\n"
                                "def charge(c):\n"
                                "    return requests.post(URL, json=c)\n\n"
                                "def other():\n"
                                "    requests.put(URL)\n");
  const auto py_retries = find_retries_around_writes(py, 0, find_writes(py, 0), find_guards(py, 0));
  REQUIRE(py_retries.size() == 1);
  CHECK(py_retries[0].line == 1);
  CHECK(py_retries[0].write.line == 3);
}

TEST_CASE("huge comments, literals and deep nesting are read without running out of stack", "[scan][evidence]") {
  std::string text = "x. /*" + std::string(300000, ' ') + "*/ post(u);\nconst s = \"" + std::string(300000, ' ') +
                     "INSERT INTO t VALUES (1)\";\n";
  text += std::string(20000, '{') + "axios.post(u)" + std::string(20000, '}') + "\n";
  const SourceFile f = file_of("big.js", text);
  const auto writes = find_writes(f, 0);
  REQUIRE(writes.size() == 2);
  CHECK(writes[0].kind == "sql insert");
  CHECK(writes[1].kind == "http POST");
  CHECK(find_retries_around_writes(f, 0, writes, find_guards(f, 0)).empty());
}
