package dev.prefill4j.engine;

import dev.prefill4j.api.PrefillException;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;

/**
 * What a session stores with a kept KV cache so that a later session continues it exactly: a fingerprint of the
 * model, the tokens whose K/V the cache holds, the pending token (generated, handed out, not yet fed) and the sampler
 * (settings and how many random numbers it drew). Big-endian: magic {@code P4SS}, version 1, fingerprint (int64),
 * token count and tokens (int32), pending (int32, -1 for none), sampler flag, then temperature (float32), top-k
 * (int32), top-p (float32), seed (int64) and draws (int64).
 *
 * @param fingerprint model fingerprint
 * @param tokens      tokens in the cache, in order
 * @param pending     next token to feed, or -1
 * @param sampler     sampler of the last generation, or {@code null}
 */
record SessionState(long fingerprint, int[] tokens, int pending, Sampler sampler) {
    private static final int MAGIC = 0x50345353; // "P4SS"

    byte[] encode() {
        ByteArrayOutputStream bytes = new ByteArrayOutputStream(32 + 4 * tokens.length);
        try (DataOutputStream out = new DataOutputStream(bytes)) {
            out.writeInt(MAGIC);
            out.writeInt(1);
            out.writeLong(fingerprint);
            out.writeInt(tokens.length);
            for (int t : tokens) {
                out.writeInt(t);
            }
            out.writeInt(pending);
            out.writeBoolean(sampler != null);
            if (sampler != null) {
                SamplerConfig c = sampler.config();
                out.writeFloat(c.temperature());
                out.writeInt(c.topK());
                out.writeFloat(c.topP());
                out.writeLong(c.seed());
                out.writeLong(sampler.draws());
            }
        } catch (IOException e) {
            throw new IllegalStateException("in-memory stream failed", e);
        }
        return bytes.toByteArray();
    }

    static SessionState decode(byte[] bytes) {
        try (DataInputStream in = new DataInputStream(new ByteArrayInputStream(bytes))) {
            if (in.readInt() != MAGIC || in.readInt() != 1) {
                throw new IOException("not a prefill4j session state");
            }
            long fingerprint = in.readLong();
            int n = in.readInt();
            if (n < 0 || n > bytes.length / 4) {
                throw new IOException("bad token count " + n);
            }
            int[] tokens = new int[n];
            for (int i = 0; i < n; i++) {
                tokens[i] = in.readInt();
            }
            int pending = in.readInt();
            Sampler sampler = null;
            if (in.readBoolean()) {
                SamplerConfig c = new SamplerConfig(in.readFloat(), in.readInt(), in.readFloat(), in.readLong());
                sampler = new Sampler(c, in.readLong());
            }
            return new SessionState(fingerprint, tokens, pending, sampler);
        } catch (IOException | IllegalArgumentException e) {
            throw new PrefillException(PrefillException.Code.IO, "the kept KV cache's session state is damaged ("
                    + e.getMessage() + "); delete the cache and start over", e);
        }
    }
}
