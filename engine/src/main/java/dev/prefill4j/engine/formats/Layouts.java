package dev.prefill4j.engine.formats;

import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;

/** Little-endian, unaligned value layouts: GGUF data carry no alignment guarantee inside a block. */
final class Layouts {
    static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);
    static final ValueLayout.OfByte I8 = ValueLayout.JAVA_BYTE;

    private Layouts() {
    }

    static void checkCount(int count, int blockSize, String id) {
        if (count < 0 || count % blockSize != 0) {
            throw new IllegalArgumentException(id + ": " + count + " elements is not a multiple of " + blockSize);
        }
    }
}
