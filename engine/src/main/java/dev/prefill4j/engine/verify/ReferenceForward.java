package dev.prefill4j.engine.verify;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.KVElementType;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.spi.WeightMatrix;
import dev.prefill4j.engine.model.LlamaConfig;
import dev.prefill4j.engine.model.LlamaModel;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;

/**
 * A scalar FP64 Llama forward pass over every prompt position: no batching, no pages, no threads, no vectors.
 * Weight rows are decoded one at a time through their format's {@link Quantizer#decode}, so it runs on models of
 * any size in little memory (slowly: use a short prompt). It shares nothing with the engine's graph or kernels but
 * the formats' decoders and, where it rounds K and V as a KV cache does, the cache's element codecs
 * ({@link KVElementType#encode}, {@link KVElementType#decode}), which are tested on their own.
 *
 * <p>With {@code activationFormats} it rounds each projection's input the way
 * {@link dev.prefill4j.engine.SessionOptions.Activations#QUANTIZED} and {@code PER_TOKEN} do, so such a configuration
 * is checked against the function it is meant to compute.
 *
 * @since 0.1
 */
@Api.Stable
public final class ReferenceForward {
    private final LlamaModel model;
    private final LlamaConfig c;
    private final Map<Quantizer, Quantizer> activationFormats;
    private final KVElementType kvType;

    /**
     * The reference with K and V kept in FP64.
     *
     * @param model             the model
     * @param activationFormats weight format to activation format; empty for float32 activations
     */
    public ReferenceForward(LlamaModel model, Map<Quantizer, Quantizer> activationFormats) {
        this(model, activationFormats, KVElementType.F32);
    }

    /**
     * The reference with each position's K (after RoPE) and V rounded as a KV cache of {@code kvType} stores them
     * ({@link KVElementType#encode}, then {@link KVElementType#decode}) before attention reads them; {@code F32}
     * keeps them in FP64.
     *
     * @param model             the model
     * @param activationFormats weight format to activation format; empty for float32 activations
     * @param kvType            the KV cache element type whose rounding to apply
     * @since 0.1
     */
    public ReferenceForward(LlamaModel model, Map<Quantizer, Quantizer> activationFormats, KVElementType kvType) {
        this.model = model;
        this.c = model.config();
        this.activationFormats = Map.copyOf(activationFormats);
        this.kvType = kvType;
    }

    /** {@return logits {@code [tokens.length][vocab]}} @param tokens the prompt */
    public float[] logits(int[] tokens) {
        int n = tokens.length;
        int dim = c.dim();
        int hd = c.headDim();
        double[][] x = new double[n][];
        for (int t = 0; t < n; t++) {
            x[t] = row(model.embedding(), tokens[t]);
        }
        int group = c.heads() / c.kvHeads();
        for (int l = 0; l < c.layers(); l++) {
            LlamaModel.Layer w = model.layer(l);
            double[][] q = new double[n][];
            double[][] k = new double[n][];
            double[][] v = new double[n][];
            for (int t = 0; t < n; t++) {
                double[] xn = rmsNorm(x[t], w.attnNorm());
                q[t] = mul(w.wq(), xn);
                k[t] = mul(w.wk(), xn);
                v[t] = mul(w.wv(), xn);
                rope(q[t], c.heads(), t);
                rope(k[t], c.kvHeads(), t);
                k[t] = stored(k[t]);
                v[t] = stored(v[t]);
            }
            for (int t = 0; t < n; t++) {
                double[] att = new double[c.qDim()];
                for (int h = 0; h < c.heads(); h++) {
                    int kvh = h / group;
                    double[] s = new double[t + 1];
                    double max = Double.NEGATIVE_INFINITY;
                    for (int j = 0; j <= t; j++) {
                        double d = 0;
                        for (int i = 0; i < hd; i++) {
                            d += q[t][h * hd + i] * k[j][kvh * hd + i];
                        }
                        s[j] = d / Math.sqrt(hd);
                        max = Math.max(max, s[j]);
                    }
                    double z = 0;
                    for (int j = 0; j <= t; j++) {
                        s[j] = Math.exp(s[j] - max);
                        z += s[j];
                    }
                    for (int j = 0; j <= t; j++) {
                        for (int i = 0; i < hd; i++) {
                            att[h * hd + i] += s[j] / z * v[j][kvh * hd + i];
                        }
                    }
                }
                add(x[t], mul(w.wo(), att));
                double[] xn = rmsNorm(x[t], w.ffnNorm());
                double[] g = mul(w.gate(), xn);
                double[] u = mul(w.up(), xn);
                for (int i = 0; i < g.length; i++) {
                    g[i] = g[i] / (1 + Math.exp(-g[i])) * u[i];
                }
                add(x[t], mul(w.down(), g));
            }
        }
        float[] out = new float[n * c.vocab()];
        for (int t = 0; t < n; t++) {
            double[] y = mul(model.output(), rmsNorm(x[t], model.outputNorm()));
            for (int i = 0; i < y.length; i++) {
                out[t * c.vocab() + i] = (float) y[i];
            }
        }
        return out;
    }

    /** {@return one position's K or V row as the KV cache gives it back: through float32 and {@link #kvType}} */
    private double[] stored(double[] row) {
        if (kvType == KVElementType.F32) {
            return row;
        }
        float[] f = new float[row.length];
        for (int i = 0; i < f.length; i++) {
            f[i] = (float) row[i];
        }
        MemorySegment cell = MemorySegment.ofArray(new byte[(int) kvType.rowBytes(f.length)]);
        kvType.encode(f, 0, f.length, cell, 0);
        kvType.decode(cell, 0, 0, f.length, f, 0);
        double[] d = new double[f.length];
        for (int i = 0; i < f.length; i++) {
            d[i] = f[i];
        }
        return d;
    }

    private static double[] row(WeightMatrix w, int r) {
        float[] f = new float[w.cols()];
        w.format().decode(w.data(), w.rowBytes() * r, f, 0, w.cols());
        double[] d = new double[f.length];
        for (int i = 0; i < f.length; i++) {
            d[i] = f[i];
        }
        return d;
    }

    private double[] mul(WeightMatrix w, double[] x) {
        double[] in = x;
        Quantizer act = activationFormats.get(w.format());
        if (act != null) {
            float[] f = new float[x.length];
            for (int i = 0; i < f.length; i++) {
                f[i] = (float) x[i];
            }
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment seg = arena.allocate(act.byteSize(f.length));
                act.encode(f, 0, f.length, seg, 0);
                act.decode(seg, 0, f, 0, f.length);
            }
            in = new double[f.length];
            for (int i = 0; i < f.length; i++) {
                in[i] = f[i];
            }
        }
        float[] rowBuf = new float[w.cols()];
        double[] y = new double[w.rows()];
        for (int o = 0; o < w.rows(); o++) {
            w.format().decode(w.data(), w.rowBytes() * o, rowBuf, 0, w.cols());
            double s = 0;
            for (int i = 0; i < rowBuf.length; i++) {
                s += rowBuf[i] * in[i];
            }
            y[o] = s;
        }
        return y;
    }

    private double[] rmsNorm(double[] x, float[] g) {
        double ss = 0;
        for (double v : x) {
            ss += v * v;
        }
        double s = 1 / Math.sqrt(ss / x.length + c.rmsEps());
        double[] y = new double[x.length];
        for (int i = 0; i < x.length; i++) {
            y[i] = x[i] * s * g[i];
        }
        return y;
    }

    private void rope(double[] x, int heads, int pos) {
        int hd = c.headDim();
        float[] divisors = model.ropeDivisors();
        for (int h = 0; h < heads; h++) {
            for (int i = 0; 2 * i < c.ropeDim(); i++) {
                double theta = pos * Math.pow(c.ropeBase(), -2.0 * i / c.ropeDim())
                        / (divisors == null ? 1 : divisors[i]);
                double a = x[h * hd + 2 * i];
                double b = x[h * hd + 2 * i + 1];
                x[h * hd + 2 * i] = a * Math.cos(theta) - b * Math.sin(theta);
                x[h * hd + 2 * i + 1] = a * Math.sin(theta) + b * Math.cos(theta);
            }
        }
    }

    private static void add(double[] a, double[] b) {
        for (int i = 0; i < a.length; i++) {
            a[i] += b[i];
        }
    }
}
