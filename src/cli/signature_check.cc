#include "cli/signature_check.h"

#include <utility>

namespace effectfence::cli {

SignatureCheck::SignatureCheck(std::vector<PublicKey> keys, bool require_signed) : require_signed_(require_signed) {
  for (PublicKey& key : keys) {
    const std::string id = key.key_id();
    keys_.emplace(id, std::move(key));
  }
}

std::vector<std::string> SignatureCheck::key_id_list() const {
  std::vector<std::string> out;
  for (const auto& [id, key] : keys_) out.push_back(id);
  return out;
}

std::string SignatureCheck::key_ids() const {
  std::string out;
  for (const auto& [id, key] : keys_) out += (out.empty() ? "" : ", ") + id;
  return out;
}

void SignatureCheck::certificate(const Certificate& c) {
  ++certificates_;
  if (!c.signature) {
    if (require_signed_) {
      ++counts_.unsigned_after;
      findings_.push_back({c.hash, "unsigned",
                           "intent '" + c.intent + "': the certificate is not signed, and --require-signed was given",
                           c.line});
    } else if (first_signed_) {
      unsigned_after(c, "committed after the ledger's first signed certificate " + *first_signed_);
    } else {
      history_.push_back(c);
    }
    return;
  }
  if (!first_signed_) first_signed_ = c.hash;
  auto lowest = lowest_signed_seq_.find(c.domain);
  if (lowest == lowest_signed_seq_.end() || c.seq < lowest->second) lowest_signed_seq_[c.domain] = c.seq;
  const CertificateSignature& s = *c.signature;
  if (keys_.empty()) {
    ++counts_.signed_unchecked;
    note_unsigned_before(c, s.unsigned_before);
    return;
  }
  const auto key = keys_.find(s.key_id);
  if (key == keys_.end()) {
    ++counts_.signed_bad;
    findings_.push_back({c.hash, "unknown_key",
                         "intent '" + c.intent + "': signed by key " + s.key_id +
                             ", which is none of the public keys given (" + key_ids() +
                             "): give that key's .pub with another --public-key if it is yours; if it is not, "
                             "someone signed this certificate with a key of their own",
                         c.line});
    return;
  }
  if (!key->second.verifies(c.hash, s.unsigned_before, s.signature)) {
    ++counts_.signed_bad;
    findings_.push_back({c.hash, "bad_signature",
                         "intent '" + c.intent + "': its signature by key " + s.key_id +
                             " does not verify: the certificate was rewritten after it was signed, or the signature "
                             "was moved here from another certificate",
                         c.line});
    return;
  }
  ++counts_.signed_verified;
  note_unsigned_before(c, s.unsigned_before);
}

void SignatureCheck::note_unsigned_before(const Certificate& c, int64_t n) {
  if (!unsigned_before_) {
    unsigned_before_ = n;
  } else if (*unsigned_before_ != n) {
    findings_.push_back({c.hash, "signing_began_twice",
                         "intent '" + c.intent + "': its signature says the ledger held " + std::to_string(n) +
                             " unsigned certificate(s) when signing began, an earlier one says " +
                             std::to_string(*unsigned_before_) +
                             ": two processes began signing at once, or the signatures come from two ledgers",
                         c.line});
  }
}

void SignatureCheck::unsigned_after(const Certificate& c, const std::string& why) {
  ++counts_.unsigned_after;
  findings_.push_back({c.hash, "unsigned_after_signing",
                       "intent '" + c.intent + "': the certificate is unsigned but " + why +
                           ". A certificate rewritten and rehashed loses its signature; once a ledger is signed, "
                           "every process that commits to it must sign (--signing-key)",
                       c.line});
}

void SignatureCheck::orphan(const std::string& certificate, const std::string& key_id) {
  findings_.push_back({certificate, "orphan_signature",
                       "a signature by key " + key_id +
                           " names this certificate, which is not in the ledger: certificates are never deleted, so "
                           "it was rewritten (rehashed) or removed",
                       0});
}

void SignatureCheck::finish(const std::function<bool(const std::string&)>& is_signed) {
  for (const Certificate& c : history_) {
    const auto lowest = lowest_signed_seq_.find(c.domain);
    if (lowest != lowest_signed_seq_.end() && lowest->second < c.seq) {
      unsigned_after(c, "domain '" + c.domain + "' has a signed certificate at seq " + std::to_string(lowest->second) +
                            ", before its seq " + std::to_string(c.seq));
    } else if (!c.parent.empty() && is_signed(c.parent)) {
      unsigned_after(c, "it builds on the signed certificate " + c.parent);
    } else {
      ++counts_.unsigned_history;
    }
  }
  history_.clear();
  // Certificates are never deleted: more unsigned history than there was
  // when signing began is signatures lost, wherever the timestamps put them.
  if (unsigned_before_ && counts_.unsigned_history > *unsigned_before_) {
    findings_.push_back({"", "unsigned_beyond_history",
                         std::to_string(counts_.unsigned_history) +
                             " certificate(s) pass as unsigned history, but the signatures say the ledger held " +
                             std::to_string(*unsigned_before_) +
                             " unsigned certificate(s) when signing began: the others lost their signatures (a "
                             "certificate rewritten and rehashed cannot be signed again, its commit time edited to "
                             "look older), or were committed by a process without the key",
                         0});
  }
  if (!keys_.empty() && certificates_ > 0 && !first_signed_) {
    findings_.push_back({"", "no_signatures",
                         "public keys were given, but none of the " + std::to_string(certificates_) +
                             " certificate(s) is signed: every signature was stripped, or this ledger was never "
                             "signed (verify it without --public-key)",
                         0});
  }
}

}  // namespace effectfence::cli
