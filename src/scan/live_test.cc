#include <catch2/catch.hpp>

#include "scan/live.h"

using namespace effectfence::scan;
using effectfence::Json;

TEST_CASE("annotations classify a served tool the way MCP reads them", "[scan][live]") {
  const auto tools = read_live_tools({
      Json{{"name", "read_file"}, {"annotations", {{"readOnlyHint", true}}}},
      Json{{"name", "write_file"}, {"annotations", {{"readOnlyHint", false}, {"idempotentHint", true}}}},
      Json{{"name", "edit_file"}, {"annotations", {{"readOnlyHint", false}, {"idempotentHint", false}, {"destructiveHint", true}}}},
      Json{{"name", "charge"}, {"annotations", {{"destructiveHint", false}}}},
      Json{{"name", "add_task"}, {"description", "Adds a task."}},
      Json{{"name", "titled"}, {"annotations", {{"title", "only a title"}}}},
      Json{{"name", "odd"}, {"annotations", {{"readOnlyHint", "yes"}}}},
      Json{{"description", "no name: skipped"}},
  });
  REQUIRE(tools.size() == 7);
  CHECK(tools[0].declared == Declared::read_only);
  CHECK(tools[1].declared == Declared::idempotent);
  CHECK(tools[2].declared == Declared::non_idempotent_or_destructive);
  CHECK(tools[3].declared == Declared::non_idempotent_or_destructive);
  CHECK(tools[4].declared == Declared::undeclared);
  CHECK(tools[4].description == "Adds a task.");
  CHECK(tools[5].declared == Declared::undeclared);
  CHECK(tools[6].declared == Declared::undeclared);  // a hint that is not a boolean is no hint
}

TEST_CASE("what wrap does by default is wrap's own rule: only readOnlyHint true passes through", "[scan][live]") {
  CHECK_FALSE(read_live_tool(Json{{"name", "r"}, {"annotations", {{"readOnlyHint", true}}}}).wrap_fences_by_default);
  CHECK(read_live_tool(Json{{"name", "w"}, {"annotations", {{"idempotentHint", true}}}}).wrap_fences_by_default);
  CHECK(read_live_tool(Json{{"name", "u"}}).wrap_fences_by_default);
  CHECK(read_live_tool(Json{{"name", "o"}, {"annotations", {{"readOnlyHint", "yes"}}}}).wrap_fences_by_default);
}
