#include <catch2/catch.hpp>

#include <memory>
#include <string>

#include "core/status.h"

using effectfence::Status;
using effectfence::StatusOr;

namespace {

StatusOr<int> parse_digit(char c) {
  if (c < '0' || c > '9') return Status::Error(std::string("not a digit: ") + c);
  return c - '0';
}

}  // namespace

TEST_CASE("Status::Ok is ok and has no message", "[status]") {
  Status status = Status::Ok();
  CHECK(status.ok());
  CHECK(status.message().empty());
}

TEST_CASE("Status::Error keeps its message byte for byte", "[status]") {
  Status status = Status::Error("cannot read /tmp/x: No such file or directory\n  (check the path)");
  CHECK_FALSE(status.ok());
  CHECK(status.message() == "cannot read /tmp/x: No such file or directory\n  (check the path)");
}

TEST_CASE("Status::NotFound is an error that says so, and other errors do not", "[status]") {
  Status missing = Status::NotFound("no ledger at /tmp/x.sqlite");
  CHECK_FALSE(missing.ok());
  CHECK(missing.is_not_found());
  CHECK(missing.message() == "no ledger at /tmp/x.sqlite");
  CHECK_FALSE(Status::Error("/tmp/x.sqlite is not a ledger file").is_not_found());
  CHECK_FALSE(Status::Ok().is_not_found());
}

TEST_CASE("StatusOr holds a value or the error saying why not", "[status]") {
  StatusOr<int> seven = parse_digit('7');
  REQUIRE(seven.ok());
  CHECK(seven.status().ok());
  CHECK(seven.value() == 7);
  CHECK(*seven == 7);

  StatusOr<int> letter = parse_digit('x');
  CHECK_FALSE(letter.ok());
  CHECK_FALSE(letter.status().ok());
  CHECK(letter.status().message() == "not a digit: x");
}

TEST_CASE("StatusOr moves a value out and reaches its members", "[status]") {
  StatusOr<std::unique_ptr<std::string>> held = std::make_unique<std::string>("ledger");
  REQUIRE(held.ok());
  CHECK((*held)->size() == 6);
  std::unique_ptr<std::string> taken = std::move(held).value();
  CHECK(*taken == "ledger");

  StatusOr<std::string> text = std::string("abc");
  CHECK(text->size() == 3);
}

TEST_CASE("an error with an empty message still fails, and says that no reason was given", "[status]") {
  const Status error = Status::Error("");
  CHECK_FALSE(error.ok());
  CHECK(error.message() == "failed, and no reason was given");
  const Status missing = Status::NotFound(std::string());
  CHECK_FALSE(missing.ok());
  CHECK(missing.is_not_found());
  const StatusOr<int> none = Status::Error("");
  CHECK_FALSE(none.ok());
}
