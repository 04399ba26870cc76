"""The floating-point units: bf16 / fp16 multipliers, the fp32 adder and conversions."""
