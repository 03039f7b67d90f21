// The engine's public API lives in include/mvllm/engine.h; layers inside src/ include it through
// this header (src/ is the include root of every library target).
#pragma once

#include "core/status.h"
#include "../../include/mvllm/engine.h"
