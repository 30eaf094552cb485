"""Weight quantization for the language-model methods.

Modules:
    ganq: GANQ's GPU-adaptive non-uniform (LUT) quantization and GPTQ's sequential protocol.
    layer: ``LayerQuant``, the LUT-quantized weight every quantizer returns.
    linear: ``QuantLinear`` (the LUT-GEMM kernel of ``rayml.kernels.lut_gemm``) and saving / loading.
    baselines: RTN, grouped RTN, GPTQ and k-means at the same bit widths.
"""
