// The SAGEATTN_SK1_* settings (docs/SETTINGS.md): each variable's values and its error are defined here only, and
// one op call reads the environment once.
#pragma once

#include <cstdint>

#include "kernel_choice.h"

namespace sage {

struct Settings {
  bool triton_prologue = false;  // SAGEATTN_SK1_PROLOGUE: "triton"; unset, empty or "hip": the HIP prologue
  KernelSettings kernels;        // SAGEATTN_SK1_SM90, SAGEATTN_SK1_MMA (kernel_choice.h)
  bool overlap_launches = true;  // SAGEATTN_SK1_OVERLAP: "0" off; unset, empty or "1" on (compat.h launch())
  bool gfx1200 = false;          // SAGEATTN_SK1_GFX1200: "1" opts in; unset, empty or "0" not (arch_rules.h)
  bool guard = false;            // SAGEATTN_SK1_GUARD: "on" (CPU only, so far); unset, empty or "off" not (guard.h)
};

// Reads and validates every variable, whatever the device: an invalid value raises, naming it and its values.
Settings read_settings();

// The settings of the sage op call in progress on this thread, read once when its outermost SettingsScope opened,
// so that sage::attention and the ops it calls see one reading; outside any call, a fresh reading. A change to the
// environment takes effect at the next call (also inside a compiled graph, where the op is opaque); a CUDA graph
// replays the kernels chosen while it was captured.
Settings call_settings();

// Opened at the start of every sage op that has settings to honour or to validate. Only the outermost one reads.
class SettingsScope {
 public:
  SettingsScope();
  ~SettingsScope();
  SettingsScope(const SettingsScope&) = delete;
  SettingsScope& operator=(const SettingsScope&) = delete;

 private:
  bool outermost_ = false;
};

// How many times read_settings has run in this process (sage::_settings_reads, for test/test_settings.py).
int64_t settings_reads();

}  // namespace sage
