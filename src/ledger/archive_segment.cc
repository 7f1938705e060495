#include "ledger/archive_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/sha256.h"
#include "core/signing.h"

namespace effectfence::archive {

namespace {

constexpr const char* kPrefix = "segment-";
constexpr const char* kSuffix = ".jsonl";
constexpr const char* kTemporarySuffix = ".tmp";

std::string dump_line(const Json& j) {
  // strict: a text column that is not UTF-8 stops the archive, naming it,
  // rather than being written as something else than the ledger holds.
  return j.dump(-1, ' ', false, Json::error_handler_t::strict) + "\n";
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno_text("opening directory " + dir));
  const bool synced = ::fsync(fd) == 0;
  const Status status = synced ? Status::Ok() : Status::Error(errno_text("syncing directory " + dir));
  ::close(fd);
  return status;
}

StatusOr<int64_t> integer_field(const Json& j, const char* name, int line) {
  const auto it = j.find(name);
  if (it == j.end() || !it->is_number_integer()) {
    return Status::Error("line " + std::to_string(line) + ": \"" + name + "\" is missing or not an integer");
  }
  return it->get<int64_t>();
}

StatusOr<std::optional<std::string>> text_or_null(const Json& j, const char* name, int line) {
  const auto it = j.find(name);
  if (it != j.end() && it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it == j.end() || !it->is_null()) {
    return Status::Error("line " + std::to_string(line) + ": \"" + name + "\" is missing or not text/null");
  }
  return std::optional<std::string>();
}

void count_row(const std::string& type, SegmentCounts* counts) {
  if (type == "certificate") ++counts->certificates;
  else if (type == "signature") ++counts->signatures;
  else if (type == "event") ++counts->events;
  else if (type == "clear") ++counts->clears;
}

bool is_row_type(const std::string& type) {
  return type == "certificate" || type == "signature" || type == "event" || type == "clear";
}

}  // namespace

std::string segment_file_name(int64_t segment) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s%06lld%s", kPrefix, static_cast<long long>(segment), kSuffix);
  return name;
}

std::optional<int64_t> segment_number(const std::string& file_name) {
  const std::string prefix = kPrefix, suffix = kSuffix;
  if (file_name.size() < prefix.size() + 6 + suffix.size()) return std::nullopt;
  if (file_name.compare(0, prefix.size(), prefix) != 0) return std::nullopt;
  if (file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0) return std::nullopt;
  const std::string digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 15 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  const int64_t n = std::stoll(digits);
  if (n < 1 || segment_file_name(n) != file_name) return std::nullopt;
  return n;
}

std::string temporary_name(const std::string& final_name) { return final_name + kTemporarySuffix; }

bool is_temporary_name(const std::string& file_name) {
  const std::string suffix = std::string(kSuffix) + kTemporarySuffix;
  return file_name.compare(0, std::strlen(kPrefix), kPrefix) == 0 && file_name.size() > suffix.size() &&
         file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string segment_signing_message(const std::string& key_id, const std::string& root) {
  return "effectfence archive segment signature v1\n" + key_id + "\n" + root;
}

SegmentBuilder::SegmentBuilder(const SegmentHeader& header) {
  Json j = {{"type", "segment"},        {"format", kSegmentFormat},     {"ledger", header.ledger_id},
            {"segment", header.segment}, {"before_ms", header.before_ms}, {"first_at", header.first_at},
            {"last_at", header.last_at}};
  j["previous"] = header.previous ? Json(*header.previous) : Json(nullptr);
  text_ = dump_line(j);
}

void SegmentBuilder::add(const Json& row) {
  text_ += dump_line(row);
  count_row(row.at("type").get<std::string>(), &counts_);
}

std::string SegmentBuilder::finish(const Signer* signer) {
  const std::string root = sha256_hex(text_);
  Json end = {{"type", "segment_end"},          {"root", root},
              {"rows", counts_.rows()},          {"certificates", counts_.certificates},
              {"signatures", counts_.signatures}, {"events", counts_.events},
              {"clears", counts_.clears}};
  end["key_id"] = signer ? Json(signer->key_id()) : Json(nullptr);
  end["signature"] = signer ? Json(signer->sign_statement(segment_signing_message(signer->key_id(), root)))
                            : Json(nullptr);
  text_ += dump_line(end);
  return root;
}

SegmentContents read_segment(const std::string& path) {
  SegmentContents c;
  // A field's value, or its type's zero; the first field missing or mistyped is the error.
  const auto field = [&c](auto read) {
    if (!read.ok() && c.error.empty()) c.error = read.status().message();
    return read.ok() ? *read : std::decay_t<decltype(*read)>();
  };
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    c.error = errno_text("cannot read it");
    return c;
  }
  std::ostringstream all;
  all << in.rdbuf();
  const std::string text = all.str();
  if (text.empty() || text.back() != '\n') {
    c.error = "it does not end with a complete line (cut short)";
    return c;
  }
  size_t start = 0;
  int line = 0;
  bool ended = false;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string_view raw(text.data() + start, end - start);
    ++line;
    if (ended) {
      c.error = "line " + std::to_string(line) + " follows the segment_end line";
      return c;
    }
    JsonError why;
    auto parsed = parse_strict(raw, &why);
    if (!parsed || !parsed->is_object() || !parsed->contains("type") || !(*parsed)["type"].is_string()) {
      c.error = "line " + std::to_string(line) + " is not a JSON object with a type" +
                (parsed ? "" : ": " + why.message);
      return c;
    }
    const std::string type = (*parsed)["type"].get<std::string>();
    if (line == 1) {
      if (type != "segment" || field(integer_field(*parsed, "format", 1)) != kSegmentFormat) {
        if (c.error.empty()) c.error = "line 1 is not a segment header of format " + std::to_string(kSegmentFormat);
        return c;
      }
      c.header.ledger_id = field(text_or_null(*parsed, "ledger", 1)).value_or("");
      c.header.segment = field(integer_field(*parsed, "segment", 1));
      c.header.previous = field(text_or_null(*parsed, "previous", 1));
      c.header.before_ms = field(integer_field(*parsed, "before_ms", 1));
      c.header.first_at = field(integer_field(*parsed, "first_at", 1));
      c.header.last_at = field(integer_field(*parsed, "last_at", 1));
      if (!c.ok()) return c;
    } else if (type == "segment_end") {
      c.computed_root = sha256_hex(std::string_view(text.data(), start));
      c.declared_root = field(text_or_null(*parsed, "root", line)).value_or("");
      c.declared.certificates = field(integer_field(*parsed, "certificates", line));
      c.declared.signatures = field(integer_field(*parsed, "signatures", line));
      c.declared.events = field(integer_field(*parsed, "events", line));
      c.declared.clears = field(integer_field(*parsed, "clears", line));
      c.key_id = field(text_or_null(*parsed, "key_id", line));
      c.signature = field(text_or_null(*parsed, "signature", line));
      if (!c.ok()) return c;
      ended = true;
    } else if (is_row_type(type)) {
      count_row(type, &c.counted);
      c.rows.push_back(std::move(*parsed));
    } else {
      c.error = "line " + std::to_string(line) + " has an unknown type \"" + type + "\"";
      return c;
    }
    start = end + 1;
  }
  if (!ended) c.error = "it has no segment_end line (cut short)";
  return c;
}

Status write_durably(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string final_path = dir + "/" + name;
  const std::string temporary_path = dir + "/" + temporary_name(name);
  const int fd = ::open(temporary_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return Status::Error(errno_text("creating " + temporary_path));
  size_t written = 0;
  std::string error;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      error = errno_text("writing " + temporary_path);
      break;
    }
    written += static_cast<size_t>(n);
  }
  if (error.empty() && ::fsync(fd) != 0) error = errno_text("syncing " + temporary_path);
  if (::close(fd) != 0 && error.empty()) error = errno_text("closing " + temporary_path);
  if (!error.empty()) return Status::Error(error);
  if (::rename(temporary_path.c_str(), final_path.c_str()) != 0) {
    return Status::Error(errno_text("renaming it to " + final_path));
  }
  return sync_directory(dir);
}

Status remove_durably(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::Error(errno_text("removing " + path));
  return sync_directory(dir);
}

Status list_directory(const std::string& dir, std::vector<std::string>* names) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return Status::Error(errno_text("reading directory " + dir));
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names->push_back(name);
  }
  ::closedir(d);
  return Status::Ok();
}

}  // namespace effectfence::archive
