#include "effectfence/refusal_text.h"
#include "fence_driver.h"

#include <unistd.h>

#include <stdexcept>
#include <utility>
#include <variant>

namespace effectfence::bench {

FenceDriver::FenceDriver(const std::string& ledger_path, Anomalies& anomalies, IntentNames intent_names)
    : anomalies_(anomalies),
      intent_prefix_("in-process-" + std::to_string(::getpid()) + "-"),
      intent_names_(intent_names) {
  Settings settings;
  settings.ledger_path = ledger_path;
  auto opened = Fence::open(settings);
  if (auto* error = std::get_if<OpenError>(&opened)) {
    throw std::runtime_error("cannot open the in-process ledger " + ledger_path + ": " + error->message);
  }
  fence_ = std::move(std::get<std::unique_ptr<Fence>>(opened));
}

std::string FenceDriver::intent_of(int64_t pair) const { return intent_name(intent_prefix_, pair, intent_names_); }

Timings FenceDriver::run(size_t in_flight, double seconds) {
  const auto start = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    timings_ = Timings{};
    slots_.assign(in_flight, Slot{});
    active_ = in_flight;
    deadline_ = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }
  for (size_t slot = 0; slot < in_flight; ++slot) start_pair(slot);
  std::unique_lock<std::mutex> lock(mu_);
  all_done_.wait(lock, [this] { return active_ == 0; });
  timings_.elapsed_s = seconds_between(start, Clock::now());
  return std::move(timings_);
}

void FenceDriver::start_pair(size_t slot) {
  PrepareRequest request;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Slot& s = slots_[slot];
    s.pair = next_pair_++;
    s.started = Clock::now();
    request.intent = intent_of(s.pair);
    request.args = Json{{"order", s.pair}, {"amount_cents", 1299}};
  }
  request.domain = "bench-account-" + std::to_string(slot);
  request.tool = "charge_card";
  request.agent = "bench-agent-" + std::to_string(slot);
  fence_->prepare_async(request, [this, slot](PrepareOutcome outcome) { on_prepared(slot, std::move(outcome)); });
}

void FenceDriver::on_prepared(size_t slot, PrepareOutcome outcome) {
  auto* admitted = std::get_if<Admitted>(&outcome);
  if (!admitted) {
    const auto* refusal = std::get_if<Refusal>(&outcome);
    std::lock_guard<std::mutex> lock(mu_);
    anomalies_.note(std::string("in-process prepare: ") + (refusal ? reason_name(refusal->reason) : "replayed"),
                    refusal ? explain(*refusal, Step::prepare) : std::string());
  }
  if (!admitted) {
    end_pair(slot, false);
    return;
  }
  Json result = {{"charged", true}, {"receipt", "r-" + admitted->ticket.intent}};
  fence_->commit_async(admitted->ticket, std::move(result),
                       [this, slot](CommitOutcome committed) { on_committed(slot, committed); });
}

void FenceDriver::on_committed(size_t slot, const CommitOutcome& outcome) {
  const auto* cert = std::get_if<Certificate>(&outcome);
  bool completed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cert) {
      anomalies_.note(std::string("in-process commit: ") + reason_name(std::get<Refusal>(outcome).reason),
                      explain(std::get<Refusal>(outcome), Step::commit));
    } else if (cert->intent != intent_of(slots_[slot].pair)) {
      anomalies_.note("in-process commit: certificate for another intent", cert->intent);
    } else {
      completed = true;
    }
  }
  end_pair(slot, completed);
}

void FenceDriver::end_pair(size_t slot, bool completed) {
  bool again = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = Clock::now();
    if (completed) timings_.samples.push_back(seconds_between(slots_[slot].started, now));
    // A failed pair retires its slot: the anomaly fails the run anyway, and a
    // refusal given synchronously must not recurse into the next prepare.
    again = completed && now < deadline_;
    if (!again && --active_ == 0) all_done_.notify_all();
  }
  if (again) start_pair(slot);
}

}  // namespace effectfence::bench
