// What a shared-server session remembers of the messages delivered to it
// under an Idempotency-Key, so that a resend of one (its client's bridge saw
// the exchange fail while the server lived) is answered with the first
// delivery's answer and never handled a second time.
//
// Answers are kept for a short while (a bridge resends within moments of a
// failure) and within a byte budget; after that only 24 bytes of digests are
// remembered, for longer, so a very late resend is told its answer is gone
// instead of being decided again. Not thread-safe: the session's mutex
// guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

namespace effectfence::shared {

struct DeliveryLimits {
  // A bridge resends within moments of a failure, and gives up on a server
  // that answered nothing for 30 s (EFFECTFENCE_SHARED_UNRESPONSIVE_MS).
  int64_t answer_keep_ms = 30'000;          // an answer is kept this long after it was given
  size_t answer_budget_bytes = 1 << 20;     // and within this many bytes of answers per session
  int64_t key_keep_ms = 600'000;            // a key without its answer is remembered this long
  size_t max_keys = 65'536;                 // and at most this many of them
};

class Deliveries {
 public:
  enum class Seen {
    first,       // new: handle it, then finish() it
    pending,     // a resend of one still being handled: wait for finish()
    answered,    // a resend of one handled: *answer is its answer (nullopt: it had none)
    forgotten,   // a resend of one handled whose answer is no longer kept
    conflicting  // the key was used for another message
  };

  explicit Deliveries(DeliveryLimits limits = {}) : limits_(limits) {}

  // Records a delivery of message under key, or recognises a resend.
  Seen deliver(const std::string& key, const std::string& message, int64_t now_ms,
               std::optional<std::string>* answer);
  // The delivery under key has been handled; answer is what it was answered
  // (nullopt for a notification, or a request the server could not answer).
  void finish(const std::string& key, std::optional<std::string> answer, int64_t now_ms);
  // Returns true iff the delivery under key is still being handled.
  bool pending(const std::string& key) const;

  size_t kept_answer_bytes() const { return answer_bytes_; }
  // Keys remembered: with their answer, pending, or forgotten.
  size_t size() const { return entries_.size() + forgotten_.size(); }

 private:
  struct Entry {
    std::string digest;  // SHA-256 of the message
    bool finished = false;
    std::optional<std::string> answer;
  };
  // 128 bits of the key's SHA-256: what a forgotten key is remembered by.
  using KeyDigest = std::pair<uint64_t, uint64_t>;
  struct KeyDigestHash {
    size_t operator()(const KeyDigest& k) const { return static_cast<size_t>(k.first ^ k.second); }
  };
  void expire(int64_t now_ms);

  const DeliveryLimits limits_;
  std::unordered_map<std::string, Entry> entries_;  // pending, or answered and kept
  std::deque<std::pair<int64_t, std::string>> answered_;  // (finished at, key), oldest first
  // Keys whose answer was dropped -> 64 bits of their message's digest.
  std::unordered_map<KeyDigest, uint64_t, KeyDigestHash> forgotten_;
  std::deque<std::pair<int64_t, KeyDigest>> dropped_;  // (answer dropped at, key), oldest first
  size_t answer_bytes_ = 0;
};

}  // namespace effectfence::shared
