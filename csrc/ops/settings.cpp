#include "settings.h"

#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

namespace sage {
namespace {

std::atomic<int64_t> reads{0};
thread_local std::optional<Settings> current;

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

}  // namespace

Settings read_settings() {
  ++reads;
  Settings s;
  const std::string prologue = env("SAGEATTN_SK1_PROLOGUE");
  TORCH_CHECK(prologue.empty() || prologue == "hip" || prologue == "triton",
              "SAGEATTN_SK1_PROLOGUE must be \"hip\" (the default, the hand-written kernel) or \"triton\", got \"",
              prologue, "\"");
  s.triton_prologue = prologue == "triton";

  const std::string sm90 = env("SAGEATTN_SK1_SM90");
  TORCH_CHECK(sm90.empty() || sm90 == "0" || sm90 == "1" || sm90 == "ws",
              "sage: SAGEATTN_SK1_SM90 must be unset (the hand-written Hopper kernel on sm_90 where it is faster, "
              "in the schedule that is faster), \"1\" (wherever it can run, serial schedule), \"ws\" (the same, "
              "warp-specialized schedule) or \"0\" (the Triton kernel), got \"", sm90, "\"");
  s.kernels.sm90 = sm90.empty()  ? Sm90Use::kAuto
                   : sm90 == "1" ? Sm90Use::kForce
                   : sm90 == "ws" ? Sm90Use::kForceWs
                                  : Sm90Use::kOff;

  const std::string mma = env("SAGEATTN_SK1_MMA");
  TORCH_CHECK(mma.empty() || mma == "0" || mma == "1",
              "sage: SAGEATTN_SK1_MMA must be unset (the default kernels), \"1\" (the hand-written mma.sync kernel on "
              "every NVIDIA GPU from sm_80 on, wherever it can run) or \"0\" (never), got \"", mma, "\"");
  s.kernels.mma = mma.empty() ? MmaUse::kAuto : mma == "1" ? MmaUse::kForce : MmaUse::kOff;

  const std::string overlap = env("SAGEATTN_SK1_OVERLAP");
  TORCH_CHECK(overlap.empty() || overlap == "0" || overlap == "1",
              "sage: SAGEATTN_SK1_OVERLAP must be \"1\" / unset (a call's GPU kernels may start while the one "
              "before them finishes, on NVIDIA sm_90 and newer) or \"0\" (each starts after the previous one ended), "
              "got \"", overlap, "\"");
  s.overlap_launches = overlap != "0";

  const std::string gfx1200 = env("SAGEATTN_SK1_GFX1200");
  TORCH_CHECK(gfx1200.empty() || gfx1200 == "0" || gfx1200 == "1",
              "sage: SAGEATTN_SK1_GFX1200 must be \"1\" (use gfx1200) or \"0\" / unset, got \"", gfx1200, "\"");
  s.gfx1200 = gfx1200 == "1";

  const std::string guard = env("SAGEATTN_SK1_GUARD");
  TORCH_CHECK(guard.empty() || guard == "off" || guard == "on",
              "sage: SAGEATTN_SK1_GUARD must be \"on\" (the query blocks INT8 would get wrong are computed with "
              "Q.K^T in the inputs' precision; CPU only so far) or \"off\" / unset, got \"", guard, "\"");
  s.guard = guard == "on";
  return s;
}

Settings call_settings() { return current ? *current : read_settings(); }

SettingsScope::SettingsScope() {
  if (current) return;
  current = read_settings();
  outermost_ = true;
}

SettingsScope::~SettingsScope() {
  if (outermost_) current.reset();
}

int64_t settings_reads() { return reads.load(); }

// Not in op_schemas.cpp's table: no tensor in, nothing to dispatch, no autograd to refuse.
TORCH_LIBRARY_FRAGMENT(sage, m) {
  m.def("_settings_reads() -> int", &settings_reads);
}

}  // namespace sage
