#include "quant_qk_int8.hip"
