#include "shared_server/deliveries.h"

#include "core/sha256.h"

namespace effectfence::shared {

Deliveries::Seen Deliveries::deliver(const std::string& key, const std::string& message, int64_t now_ms,
                                     std::optional<std::string>* answer) {
  expire(now_ms);
  const std::string digest = sha256_hex(message);
  auto [it, inserted] = entries_.try_emplace(key);
  if (inserted) {
    it->second.digest = digest;
    return Seen::first;
  }
  const Entry& entry = it->second;
  if (entry.digest != digest) return Seen::conflicting;
  if (!entry.finished) return Seen::pending;
  if (entry.answer_dropped) return Seen::forgotten;
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
    it->second.answer.reset();
    it->second.answer_dropped = true;
    dropped_.emplace_back(now_ms, key);
  }
  while (!dropped_.empty() && (now_ms - dropped_.front().first > limits_.key_keep_ms || dropped_.size() > limits_.max_keys)) {
    entries_.erase(dropped_.front().second);
    dropped_.pop_front();
  }
}

}  // namespace effectfence::shared
