#include <catch2/catch.hpp>

#include "scan/words.h"

using namespace effectfence::scan;
using Words = std::vector<std::string>;

TEST_CASE("identifiers and prose split into lower-case words", "[scan][words]") {
  CHECK(split_words("deriveIdempotencyKey") == Words{"derive", "idempotency", "key"});
  CHECK(split_words("request_id") == Words{"request", "id"});
  CHECK(split_words("HTTPClient") == Words{"http", "client"});
  CHECK(split_words("X-Idempotency-Key") == Words{"x", "idempotency", "key"});
  CHECK(split_words("Reads a file.") == Words{"reads", "a", "file"});
}

TEST_CASE("effect and read words, distinct and in order", "[scan][words]") {
  CHECK(effect_words("send_payout: Sends a payout and charges the fee") ==
        Words{"send", "payout", "sends", "charges"});
  CHECK(read_words("read_balance: Reads the current balance") == Words{"read", "reads"});
  CHECK(effect_words("Reads the current balance").empty());
}

TEST_CASE("the leading word is the name's first known word, else the description's", "[scan][words]") {
  CHECK(leading_word("list_transfers", "Lists recent transfers") == "list");
  CHECK(leading_word("create_payment_link", "") == "create");
  CHECK(leading_word("open_task_details", "Get details of a task") == "get");
  CHECK(leading_word("frobnicate", "") == "");
}

TEST_CASE("idempotency guards are named in camelCase, snake_case and more", "[scan][words]") {
  CHECK(names_guard("deriveIdempotencyKey"));
  CHECK(names_guard("idempotency_key"));
  CHECK(names_guard("dedupeKey"));
  CHECK(names_guard("request_id"));
  CHECK(names_guard("clientRequestId"));
  CHECK(names_guard("IDEMPOTENT"));
  CHECK_FALSE(names_guard("requestBody"));
  CHECK_FALSE(names_guard("identity"));
  CHECK_FALSE(names_guard("paymentId"));
  CHECK_FALSE(names_guard("idempotentHint"));  // an MCP annotation, not a guard
}

TEST_CASE("retry names", "[scan][words]") {
  CHECK(names_retry("maxRetries"));
  CHECK(names_retry("attempt"));
  CHECK(names_retry("withBackoff"));
  CHECK_FALSE(names_retry("items"));
}
