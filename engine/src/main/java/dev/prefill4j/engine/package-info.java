/**
 * The prefill4j engine API: open an {@link dev.prefill4j.engine.Engine} (it selects a backend, attention kernel
 * and KV store through the {@linkplain dev.prefill4j.engine.registry.PluginRegistry registry}), load a model,
 * open a {@link dev.prefill4j.engine.Session} and prefill, decode or generate.
 *
 * <pre>{@code
 * try (Engine engine = Engine.builder().threads(2).build();
 *      LlamaModel model = engine.load(Path.of("model.gguf"));
 *      Session session = engine.newSession(model, SessionOptions.defaults())) {
 *     Generation g = session.generate("Once upon a time", 32, new Sampler(SamplerConfig.greedy()), null);
 *     System.out.println(g.text());
 * }
 * }</pre>
 *
 * <p>Null policy: no parameter or return value is {@code null} unless its Javadoc says so.
 *
 * @since 0.1
 */
@Api.Stable
package dev.prefill4j.engine;

import dev.prefill4j.api.Api;
