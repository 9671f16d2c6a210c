#include "quant_v_fp8.hip"
