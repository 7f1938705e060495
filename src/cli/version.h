#pragma once
namespace effectfence::cli {
constexpr const char* kVersion = "0.1.0";
}
