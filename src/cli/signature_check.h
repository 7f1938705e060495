// verify's signature rules, one place for a ledger and an export alike.
//
// Certificates are fed in the order they were committed. Each signed one
// must carry a signature by one of the public keys given that verifies
// (bad_signature, unknown_key). An unsigned one is acceptable only as
// history from before signing began: an attacker who rewrites a signed
// certificate and rehashes it (and every descendant) cannot sign the new
// hashes, so the rewritten certificates come out unsigned, their old
// signatures left behind or deleted. Hence (unsigned_after_signing):
//   an unsigned certificate fails if it was committed after the ledger's
//   first signed certificate, if it builds on (parent) a signed
//   certificate, or if a signed certificate of its domain has a lower seq.
// And since every signature covers how many unsigned certificates the
// ledger held when signing began, more unsigned history than that fails
// (unsigned_beyond_history): rewriting the first signed certificates and
// editing their commit times cannot pass them off as history.
// With --require-signed every unsigned certificate fails (unsigned). With
// public keys given, a ledger holding certificates none of which is
// signed fails (no_signatures): stripping every signature is the attack
// in its simplest form. A signature whose certificate is not there
// (orphan_signature) is what rehashing leaves behind: certificates are
// never deleted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/signing.h"

namespace effectfence::cli {

class SignatureCheck {
 public:
  struct Finding {
    std::string certificate;
    std::string kind;
    std::string message;
    int64_t line = 0;  // export line, 0 for a ledger
  };
  struct Counts {
    int64_t signed_verified = 0;   // by a key given, and the signature checks out
    int64_t signed_unchecked = 0;  // no public key given: not checked
    int64_t signed_bad = 0;        // bad_signature or unknown_key
    int64_t unsigned_history = 0;  // from before signing began
    int64_t unsigned_after = 0;    // unsigned_after_signing
  };
  // keys: those verify was given (none: signatures are counted, not checked).
  SignatureCheck(std::vector<PublicKey> keys, bool require_signed);

  struct Certificate {
    std::string hash, intent, parent, domain;
    int64_t seq = 0;
    int64_t line = 0;
    std::optional<CertificateSignature> signature;
  };
  // REQUIRES: called in commit order.
  void certificate(const Certificate& c);
  // A signature row whose certificate is not in the ledger.
  void orphan(const std::string& certificate, const std::string& key_id);
  // is_signed(hash): whether that certificate carries a signature (for
  // the parent rule: a parent's row may come later than the first signed
  // certificate once timestamps were edited).
  void finish(const std::function<bool(const std::string&)>& is_signed);

  const std::vector<Finding>& findings() const { return findings_; }
  const Counts& counts() const { return counts_; }
  bool checks_keys() const { return !keys_.empty(); }
  bool requires_signed() const { return require_signed_; }
  // Counts n certificates as unsigned history without walking them: a
  // ledger with no signature at all, checked without keys.
  void unsigned_history_not_walked(int64_t n) { counts_.unsigned_history += n; }
  std::vector<std::string> key_id_list() const;
  // "key ID, key ID": the keys given.
  std::string key_ids() const;

 private:
  void unsigned_after(const Certificate& c, const std::string& why);
  // Every signature must say the same about when signing began.
  void note_unsigned_before(const Certificate& c, int64_t n);

  std::map<std::string, PublicKey> keys_;  // by key id
  bool require_signed_;
  std::optional<std::string> first_signed_;  // hash of the first signed certificate
  std::optional<int64_t> unsigned_before_;   // what the first signature says (see core/signing.h)
  std::map<std::string, int64_t> lowest_signed_seq_;  // by domain
  std::vector<Certificate> history_;  // unsigned before the first signed one: judged at finish()
  int64_t certificates_ = 0;
  Counts counts_;
  std::vector<Finding> findings_;
};

}  // namespace effectfence::cli
