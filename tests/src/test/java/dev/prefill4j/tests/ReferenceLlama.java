package dev.prefill4j.tests;

import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.engine.gguf.GgufContent;
import dev.prefill4j.engine.gguf.GgufTensor;
import dev.prefill4j.engine.registry.PluginRegistry;

/**
 * An independent scalar FP64 Llama forward pass over the dequantized weights, for every prompt position at once
 * (full causal attention, no KV cache, no pages, no threads). Deliberately naive: it shares nothing with the
 * engine's graph but the format decoders (which are tested against FORMATS.md and llama.cpp's files on their own).
 * Semantics from FORMATS.md §7-8: RMSNorm, RoPE in llama.cpp's "normal" (adjacent pairs) form, GQA, SwiGLU.
 */
final class ReferenceLlama {
    private ReferenceLlama() {
    }

    private static double[][] matrix(GgufContent g, PluginRegistry r, String name) {
        GgufTensor t = g.tensor(name).orElseThrow(() -> new AssertionError("missing " + name));
        int cols = (int) t.ne()[0];
        int rows = t.ne().length > 1 ? (int) t.ne()[1] : 1;
        Quantizer q = r.requireFormat(t.type(), name);
        long rowBytes = q.byteSize(cols);
        float[] row = new float[cols];
        double[][] m = new double[rows][cols];
        for (int o = 0; o < rows; o++) {
            q.decode(t.data(), rowBytes * o, row, 0, cols);
            for (int i = 0; i < cols; i++) {
                m[o][i] = row[i];
            }
        }
        return m;
    }

    private static double[] rmsNorm(double[] x, double[] g, double eps) {
        double ss = 0;
        for (double v : x) {
            ss += v * v;
        }
        double s = 1 / Math.sqrt(ss / x.length + eps);
        double[] y = new double[x.length];
        for (int i = 0; i < x.length; i++) {
            y[i] = x[i] * s * g[i];
        }
        return y;
    }

    private static double[] mul(double[][] w, double[] x) {
        double[] y = new double[w.length];
        for (int o = 0; o < w.length; o++) {
            double s = 0;
            for (int i = 0; i < x.length; i++) {
                s += w[o][i] * x[i];
            }
            y[o] = s;
        }
        return y;
    }

    private static void rope(double[] x, int heads, int hd, int ropeDim, int pos, double base) {
        for (int h = 0; h < heads; h++) {
            for (int i = 0; 2 * i < ropeDim; i++) {
                double theta = pos * Math.pow(base, -2.0 * i / ropeDim);
                double a = x[h * hd + 2 * i];
                double b = x[h * hd + 2 * i + 1];
                x[h * hd + 2 * i] = a * Math.cos(theta) - b * Math.sin(theta);
                x[h * hd + 2 * i + 1] = a * Math.sin(theta) + b * Math.cos(theta);
            }
        }
    }

    /** {@return logits {@code [tokens.length][vocab]} as float} */
    static float[] logits(GgufContent g, PluginRegistry r, int[] tokens) {
        int dim = (int) g.requireLong("llama.embedding_length");
        int layers = (int) g.requireLong("llama.block_count");
        int heads = (int) g.requireLong("llama.attention.head_count");
        int kvHeads = (int) g.getLong("llama.attention.head_count_kv", heads);
        int hd = dim / heads;
        int ropeDim = (int) g.getLong("llama.rope.dimension_count", hd);
        double base = g.getDouble("llama.rope.freq_base", 10000);
        double eps = g.getDouble("llama.attention.layer_norm_rms_epsilon", 1e-5);
        double[][] emb = matrix(g, r, "token_embd.weight");
        double[][] out = g.tensor("output.weight").isPresent() ? matrix(g, r, "output.weight") : emb;
        int n = tokens.length;
        double[][] x = new double[n][];
        for (int t = 0; t < n; t++) {
            x[t] = emb[tokens[t]].clone();
        }
        int group = heads / kvHeads;
        for (int l = 0; l < layers; l++) {
            String p = "blk." + l + ".";
            double[] an = matrix(g, r, p + "attn_norm.weight")[0];
            double[][] wq = matrix(g, r, p + "attn_q.weight");
            double[][] wk = matrix(g, r, p + "attn_k.weight");
            double[][] wv = matrix(g, r, p + "attn_v.weight");
            double[][] wo = matrix(g, r, p + "attn_output.weight");
            double[] fn = matrix(g, r, p + "ffn_norm.weight")[0];
            double[][] w1 = matrix(g, r, p + "ffn_gate.weight");
            double[][] w3 = matrix(g, r, p + "ffn_up.weight");
            double[][] w2 = matrix(g, r, p + "ffn_down.weight");
            double[][] q = new double[n][];
            double[][] k = new double[n][];
            double[][] v = new double[n][];
            for (int t = 0; t < n; t++) {
                double[] xn = rmsNorm(x[t], an, eps);
                q[t] = mul(wq, xn);
                k[t] = mul(wk, xn);
                v[t] = mul(wv, xn);
                rope(q[t], heads, hd, ropeDim, t, base);
                rope(k[t], kvHeads, hd, ropeDim, t, base);
            }
            for (int t = 0; t < n; t++) {
                double[] att = new double[heads * hd];
                for (int h = 0; h < heads; h++) {
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
                double[] o = mul(wo, att);
                for (int i = 0; i < dim; i++) {
                    x[t][i] += o[i];
                }
                double[] xn = rmsNorm(x[t], fn, eps);
                double[] a = mul(w1, xn);
                double[] b = mul(w3, xn);
                for (int i = 0; i < a.length; i++) {
                    a[i] = a[i] / (1 + Math.exp(-a[i])) * b[i];
                }
                double[] d = mul(w2, a);
                for (int i = 0; i < dim; i++) {
                    x[t][i] += d[i];
                }
            }
        }
        double[] on = matrix(g, r, "output_norm.weight")[0];
        float[] logits = new float[n * out.length];
        for (int t = 0; t < n; t++) {
            double[] y = mul(out, rmsNorm(x[t], on, eps));
            for (int i = 0; i < y.length; i++) {
                logits[t * out.length + i] = (float) y[i];
            }
        }
        return logits;
    }
}
