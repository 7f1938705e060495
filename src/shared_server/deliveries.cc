#include "shared_server/deliveries.h"

#include <cstdlib>

#include "core/sha256.h"

namespace effectfence::shared {
namespace {

uint64_t hex64(const std::string& hex, size_t at) { return std::strtoull(hex.substr(at, 16).c_str(), nullptr, 16); }

}  // namespace

Deliveries::Seen Deliveries::deliver(const std::string& key, const std::string& message, int64_t now_ms,
                                     std::optional<std::string>* answer) {
  expire(now_ms);
  const std::string digest = sha256_hex(message);
  if (!forgotten_.empty()) {
    const std::string key_hex = sha256_hex(key);
    auto gone = forgotten_.find({hex64(key_hex, 0), hex64(key_hex, 16)});
    if (gone != forgotten_.end()) return gone->second == hex64(digest, 0) ? Seen::forgotten : Seen::conflicting;
  }
  auto [it, inserted] = entries_.try_emplace(key);
  if (inserted) {
    it->second.digest = digest;
    return Seen::first;
  }
  const Entry& entry = it->second;
  if (entry.digest != digest) return Seen::conflicting;
  if (!entry.finished) return Seen::pending;
  *answer = entry.answer;
  return Seen::answered;
}

void Deliveries::finish(const std::string& key, std::optional<std::string> answer, int64_t now_ms) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.finished) return;
  it->second.finished = true;
  if (answer) answer_bytes_ += answer->size();
  it->second.answer = std::move(answer);
  answered_.emplace_back(now_ms, key);
  expire(now_ms);
}

bool Deliveries::pending(const std::string& key) const {
  auto it = entries_.find(key);
  return it != entries_.end() && !it->second.finished;
}

void Deliveries::expire(int64_t now_ms) {
  while (!answered_.empty() && (now_ms - answered_.front().first > limits_.answer_keep_ms ||
                                answer_bytes_ > limits_.answer_budget_bytes)) {
    const std::string key = std::move(answered_.front().second);
    answered_.pop_front();
    auto it = entries_.find(key);
    if (it == entries_.end()) continue;
    if (it->second.answer) answer_bytes_ -= it->second.answer->size();
    const std::string key_hex = sha256_hex(key);
    const KeyDigest gone{hex64(key_hex, 0), hex64(key_hex, 16)};
    forgotten_[gone] = hex64(it->second.digest, 0);
    dropped_.emplace_back(now_ms, gone);
    entries_.erase(it);
  }
  while (!dropped_.empty() && (now_ms - dropped_.front().first > limits_.key_keep_ms || dropped_.size() > limits_.max_keys)) {
    forgotten_.erase(dropped_.front().second);
    dropped_.pop_front();
  }
}

}  // namespace effectfence::shared
