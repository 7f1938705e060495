// The scan report for people (text) and for machines (JSON).
#pragma once

#include <string>

#include "effectfence/json.h"
#include "scan/report.h"

namespace effectfence::scan {

std::string render_text(const ScanReport& report);

Json render_json(const ScanReport& report);

}  // namespace effectfence::scan
