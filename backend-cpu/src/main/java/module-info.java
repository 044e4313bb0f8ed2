/**
 * The CPU backend, the default and the reference every other backend is checked against: multi-threaded
 * Vector API kernels. GEMM decodes each weight tile once through its format's
 * {@link dev.prefill4j.api.spi.Quantizer#decode} into a cache-resident float buffer and reuses it across every
 * activation row; attention reads the KV cache page by page with an online softmax.
 *
 * @provides dev.prefill4j.api.spi.Backend cpu (priority 100)
 * @provides dev.prefill4j.api.spi.Attention cpu-paged (priority 100)
 * @since 0.1
 */
module dev.prefill4j.backend.cpu {
    requires dev.prefill4j.api;
    requires jdk.incubator.vector;

    provides dev.prefill4j.api.spi.Backend with dev.prefill4j.backend.cpu.CpuBackend;
    provides dev.prefill4j.api.spi.Attention with dev.prefill4j.backend.cpu.CpuAttention;
}
