package dev.prefill4j.api;

/**
 * The version of the SPI contract, as {@code MAJOR.MINOR}.
 *
 * <p>A provider returns {@link #CURRENT} from {@code apiVersion()}. Because {@code CURRENT} is a compile-time
 * constant, javac copies its value into the provider's class file: the provider therefore reports the version
 * it was <em>built</em> against, not the version present at run time. The engine accepts a provider whose
 * major version equals its own and whose minor version is not newer than its own ({@link #isCompatible}).
 *
 * @since 0.1
 */
@Api.Stable
public final class ApiVersion {
    /**
     * The contract version of this core-api build (1.1: {@code Quantizer.dotPrepared} and its two companions; 1.2:
     * {@code Quantizer.dotPreparedRows}; 1.3: {@code ComputeDevice.feedForward} and {@code feedForwardBlock}; 1.4:
     * {@code Quantizer.dotEncodedRows}; 1.5: {@code Quantizer.encodedDotIsExact}; 1.6: {@code
     * Blocks.ONE_ROW_MAX_COUNT}; 1.7: {@code Quantizer.packForDecode} and {@code PackedMatrix}; 1.8: {@code
     * Quantizer.packedCopyDecodes} and {@code PackedMatrix.decodeColumns}; 1.9: a {@code PackedMatrix} may take float32
     * activations only, {@code preparedBytes()} 0; 1.10: {@code ComputeDevice.matmulAll}; 1.11: {@code
     * Blocks.groupBlockOffset}, {@code groupBlockStride} and {@code PAIRED_GROUPS}, {@code FloatPackedMatrix}; 1.12:
     * {@code ComputeDevice.resident}, {@code Blocks.CPU_VENDOR}; 1.13: {@code ComputeDevice.decodeRow}).
     */
    public static final String CURRENT = "1.13";

    private ApiVersion() {
    }

    /**
     * {@return whether a provider built against {@code providerVersion} runs against this core-api}
     *
     * @param providerVersion a {@code MAJOR.MINOR} string as reported by a provider
     */
    public static boolean isCompatible(String providerVersion) {
        int[] mine = parse(CURRENT);
        int[] theirs;
        try {
            theirs = parse(providerVersion);
        } catch (IllegalArgumentException e) {
            return false;
        }
        return mine[0] == theirs[0] && theirs[1] <= mine[1];
    }

    private static int[] parse(String v) {
        String[] parts = v.split("\\.");
        if (parts.length != 2) {
            throw new IllegalArgumentException("API version must be MAJOR.MINOR: " + v);
        }
        try {
            return new int[] {Integer.parseInt(parts[0]), Integer.parseInt(parts[1])};
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("API version must be MAJOR.MINOR: " + v, e);
        }
    }
}
