package dev.prefill4j.quant.q4k;

import dev.prefill4j.api.spi.Blocks;

/**
 * The scale searches of ggml's K-quant reference quantizers (ggml-quants.c {@code make_qkx2_quants},
 * {@code make_qx_quants}), restated in float arithmetic in the same order, so the chosen scales — and hence the
 * bytes — match llama-quantize's.
 */
final class KQuants {
    private KQuants() {
    }

    /**
     * Affine search for one sub-block: levels {@code 0..nmax} with a scale and a non-positive offset, minimising the
     * weighted squared error over {@code nstep + 1} candidate scales around {@code nmax / (max - min)}.
     *
     * @return the scale; {@code theMin[0]} receives {@code -min} (non-negative); levels go to {@code out[outOffset..]}
     */
    static float makeQkx2(int n, int nmax, float[] x, float[] weights, int[] out, int outOffset, float[] theMin,
                          int[] aux, float rmin, float rdelta, int nstep) {
        float min = x[0];
        float max = x[0];
        float sumW = weights[0];
        float sumX = sumW * x[0];
        for (int i = 1; i < n; i++) {
            if (x[i] < min) {
                min = x[i];
            }
            if (x[i] > max) {
                max = x[i];
            }
            float w = weights[i];
            sumW += w;
            sumX += w * x[i];
        }
        if (min > 0) {
            min = 0;
        }
        if (max == min) {
            for (int i = 0; i < n; i++) {
                out[outOffset + i] = 0;
            }
            theMin[0] = -min;
            return 0f;
        }
        float iscale = nmax / (max - min);
        float scale = 1 / iscale;
        float bestError = 0;
        for (int i = 0; i < n; i++) {
            int l = Math.max(0, Math.min(nmax, Blocks.nearestInt(iscale * (x[i] - min))));
            out[outOffset + i] = l;
            float diff = scale * l + min - x[i];
            bestError += weights[i] * (diff * diff);
        }
        for (int is = 0; is <= nstep; is++) {
            iscale = (rmin + rdelta * is + nmax) / (max - min);
            float sumL = 0;
            float sumL2 = 0;
            float sumXL = 0;
            for (int i = 0; i < n; i++) {
                int l = Math.max(0, Math.min(nmax, Blocks.nearestInt(iscale * (x[i] - min))));
                aux[i] = l;
                float w = weights[i];
                sumL += w * l;
                sumL2 += w * l * l;
                sumXL += w * l * x[i];
            }
            float det = sumW * sumL2 - sumL * sumL;
            if (det > 0) {
                float thisScale = (sumW * sumXL - sumX * sumL) / det;
                float thisMin = (sumL2 * sumX - sumL * sumXL) / det;
                if (thisMin > 0) {
                    thisMin = 0;
                    thisScale = sumXL / sumL2;
                }
                float error = 0;
                for (int i = 0; i < n; i++) {
                    float diff = thisScale * aux[i] + thisMin - x[i];
                    error += weights[i] * (diff * diff);
                }
                if (error < bestError) {
                    for (int i = 0; i < n; i++) {
                        out[outOffset + i] = aux[i];
                    }
                    bestError = error;
                    scale = thisScale;
                    min = thisMin;
                }
            }
        }
        theMin[0] = -min;
        return scale;
    }

    /**
     * Symmetric search for one group (rmse_type 1: weights {@code x^2}): levels {@code -nmax..nmax-1} stored as
     * {@code l + nmax}, candidate scales {@code -(nmax + 0.1 is) / max} for {@code is = -9..9}.
     *
     * @return the scale; levels go to {@code out[outOffset..]}
     */
    static float makeQx(int n, int nmax, float[] x, int xOffset, int[] out, int outOffset) {
        float max = 0;
        float amax = 0;
        for (int i = 0; i < n; i++) {
            float ax = Math.abs(x[xOffset + i]);
            if (ax > amax) {
                amax = ax;
                max = x[xOffset + i];
            }
        }
        if (amax < 1e-15f) { // GROUP_MAX_EPS
            for (int i = 0; i < n; i++) {
                out[outOffset + i] = 0;
            }
            return 0f;
        }
        float iscale = -nmax / max;
        float sumLX = 0;
        float sumL2 = 0;
        for (int i = 0; i < n; i++) {
            float v = x[xOffset + i];
            int l = Math.max(-nmax, Math.min(nmax - 1, Blocks.nearestInt(iscale * v)));
            out[outOffset + i] = l + nmax;
            float w = v * v;
            sumLX += w * v * l;
            sumL2 += w * l * l;
        }
        float scale = sumL2 != 0 ? sumLX / sumL2 : 0f;
        float best = scale * sumLX;
        for (int is = -9; is <= 9; is++) {
            if (is == 0) {
                continue;
            }
            iscale = -(nmax + 0.1f * is) / max;
            sumLX = 0;
            sumL2 = 0;
            for (int i = 0; i < n; i++) {
                float v = x[xOffset + i];
                int l = Math.max(-nmax, Math.min(nmax - 1, Blocks.nearestInt(iscale * v)));
                float w = v * v;
                sumLX += w * v * l;
                sumL2 += w * l * l;
            }
            if (sumL2 > 0 && sumLX * sumLX > best * sumL2) {
                for (int i = 0; i < n; i++) {
                    int l = Blocks.nearestInt(iscale * x[xOffset + i]);
                    out[outOffset + i] = nmax + Math.max(-nmax, Math.min(nmax - 1, l));
                }
                scale = sumLX / sumL2;
                best = scale * sumLX;
            }
        }
        return scale;
    }
}
