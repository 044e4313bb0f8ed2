package dev.prefill4j.engine.registry;

import dev.prefill4j.api.Api;
import dev.prefill4j.api.ApiVersion;
import dev.prefill4j.api.spi.Attention;
import dev.prefill4j.api.spi.Availability;
import dev.prefill4j.api.spi.Backend;
import dev.prefill4j.api.spi.KVStore;
import dev.prefill4j.api.spi.Plugin;
import dev.prefill4j.api.spi.Quantizer;
import dev.prefill4j.api.PrefillException;
import dev.prefill4j.engine.gguf.GgmlType;
import java.security.CodeSource;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.ServiceConfigurationError;
import java.util.ServiceLoader;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.ToIntFunction;
import java.util.regex.Pattern;
import java.util.stream.Collectors;

/**
 * The one place prefill4j discovers plugins: {@link Quantizer}s, {@link Backend}s, {@link Attention} kernels and
 * {@link KVStore}s, through {@link ServiceLoader} (module path, class path via {@code META-INF/services}, or a
 * given {@link ModuleLayer}), plus providers added programmatically.
 *
 * <p><b>Rules.</b>
 * <ul>
 *   <li>A provider that throws while loading, reports a malformed id, or was built against an incompatible
 *       {@linkplain ApiVersion API version} is skipped and reported in {@link #problems()}; the rest load.</li>
 *   <li>Two providers of one SPI with the same id are a hard error ({@code P4J-PLUGIN}), as are two formats that
 *       claim the same GGUF type unless {@value #PROP_FORMAT} picks one.</li>
 *   <li>{@value #PROP_EXCLUDE} (comma-separated ids) switches providers off; {@link Builder#discovery(boolean)}
 *       switches discovery off entirely, leaving only programmatic providers.</li>
 *   <li>Selection: an explicit id (argument, or the properties {@value #PROP_BACKEND}, {@value #PROP_ATTENTION},
 *       {@value #PROP_KV}); otherwise the available provider with the highest priority, ties broken by id.</li>
 *   <li>A model tensor whose format no module provides fails with a message that names the module to add.</li>
 * </ul>
 * The discovered list and each final choice are logged to {@link System.Logger} {@code dev.prefill4j.registry}
 * at {@code DEBUG}.
 *
 * <p>Immutable once built; thread-safe.
 *
 * @since 0.1
 */
@Api.Stable
public final class PluginRegistry {
    /** Explicit backend id. */
    public static final String PROP_BACKEND = "dev.prefill4j.backend";
    /** Explicit attention kernel id. */
    public static final String PROP_ATTENTION = "dev.prefill4j.attention";
    /** Explicit KV store id. */
    public static final String PROP_KV = "dev.prefill4j.kv";
    /** Comma-separated ids of formats preferred when two claim the same GGUF type. */
    public static final String PROP_FORMAT = "dev.prefill4j.quant.provider";
    /** Comma-separated provider ids to switch off. */
    public static final String PROP_EXCLUDE = "dev.prefill4j.exclude";

    private static final System.Logger LOG = System.getLogger("dev.prefill4j.registry");
    private static final Pattern ID = Pattern.compile("[a-z0-9][a-z0-9_.-]*");

    private final Map<String, Quantizer> quantizers;
    private final Map<String, Backend> backends;
    private final Map<String, Attention> attentions;
    private final Map<String, KVStore> kvStores;
    private final Map<Integer, Quantizer> byGgufType = new HashMap<>();
    private final List<PluginInfo> infos = new ArrayList<>();
    private final List<String> problems = new ArrayList<>();
    private final Map<String, String> properties;

    private PluginRegistry(Builder b) {
        this.properties = b.properties;
        Set<String> excluded = Arrays.stream(prop(PROP_EXCLUDE, "").split(","))
                .map(String::trim).filter(s -> !s.isEmpty()).collect(Collectors.toSet());
        quantizers = load(Quantizer.class, b, excluded);
        backends = load(Backend.class, b, excluded);
        attentions = load(Attention.class, b, excluded);
        kvStores = load(KVStore.class, b, excluded);
        indexFormats();
        LOG.log(System.Logger.Level.DEBUG, () -> "discovered plugins: " + infos);
        // Exclusions were asked for: DEBUG. Providers that failed: WARNING.
        problems.forEach(p -> LOG.log(p.contains(" excluded by ") ? System.Logger.Level.DEBUG
                : System.Logger.Level.WARNING, p));
    }

    /** {@return a registry over the modules visible to the engine, with system properties} */
    public static PluginRegistry load() {
        return builder().build();
    }

    /** {@return a builder} */
    public static Builder builder() {
        return new Builder();
    }

    private String prop(String key, String fallback) {
        String v = properties.get(key);
        return v == null || v.isBlank() ? fallback : v.trim();
    }

    private <S extends Plugin> Map<String, S> load(Class<S> spi, Builder b, Set<String> excluded) {
        List<S> found = new ArrayList<>();
        if (b.discovery) {
            ServiceLoader<S> loader = b.layer != null ? ServiceLoader.load(b.layer, spi)
                    : b.classLoader != null ? ServiceLoader.load(spi, b.classLoader) : ServiceLoader.load(spi);
            Iterator<S> it = loader.iterator();
            // ServiceLoader keeps going after a provider fails; the guard bounds a loader that fails forever.
            for (int guard = 0; guard < 10_000; guard++) {
                try {
                    if (!it.hasNext()) {
                        break;
                    }
                    found.add(it.next());
                } catch (ServiceConfigurationError | LinkageError | RuntimeException e) {
                    problems.add(spi.getSimpleName() + " provider skipped: it failed to load: " + rootMessage(e));
                }
            }
        }
        for (Plugin p : b.added) {
            if (spi.isInstance(p)) {
                found.add(spi.cast(p));
            }
        }
        Map<String, S> byId = new LinkedHashMap<>();
        found.sort(Comparator.comparing(p -> safeId(p)));
        for (S p : found) {
            String id;
            String api;
            try {
                id = p.id();
                api = p.apiVersion();
            } catch (RuntimeException e) {
                problems.add(spi.getSimpleName() + " " + p.getClass().getName() + " skipped: " + rootMessage(e));
                continue;
            }
            if (id == null || !ID.matcher(id).matches()) {
                problems.add(spi.getSimpleName() + " " + p.getClass().getName() + " skipped: malformed id '" + id
                        + "' (lower case letters, digits, '_', '-', '.')");
                continue;
            }
            if (api == null || !ApiVersion.isCompatible(api)) {
                problems.add(spi.getSimpleName() + " '" + id + "' from " + moduleOf(p) + " skipped: built against API "
                        + api + ", this engine speaks " + ApiVersion.CURRENT + "; rebuild the plugin against core-api "
                        + ApiVersion.CURRENT);
                continue;
            }
            if (excluded.contains(id)) {
                problems.add(spi.getSimpleName() + " '" + id + "' excluded by " + PROP_EXCLUDE);
                continue;
            }
            S previous = byId.putIfAbsent(id, p);
            if (previous != null) {
                throw new PrefillException(PrefillException.Code.PLUGIN, "two " + spi.getSimpleName()
                        + " providers have the id '" + id + "': " + describe(previous) + " and " + describe(p)
                        + "; remove one of the modules");
            }
            infos.add(new PluginInfo(spi.getSimpleName(), id, moduleOf(p), versionOf(p), api, safeDescription(p),
                    availabilityOf(p)));
        }
        return byId;
    }

    private static String safeId(Plugin p) {
        try {
            return String.valueOf(p.id());
        } catch (RuntimeException e) {
            return "";
        }
    }

    private static String safeDescription(Plugin p) {
        try {
            return p.description();
        } catch (RuntimeException e) {
            return "(description failed: " + e + ")";
        }
    }

    private static String availabilityOf(Plugin p) {
        Availability a = availability(p);
        return a.available() ? "available" : "unavailable: " + a.reason();
    }

    private static Availability availability(Plugin p) {
        if (p instanceof Backend b) {
            try {
                return b.availability();
            } catch (RuntimeException e) {
                return Availability.unavailable("availability check failed: " + e);
            }
        }
        return Availability.available("");
    }

    private void indexFormats() {
        Set<String> preferred = Arrays.stream(prop(PROP_FORMAT, "").split(",")).map(String::trim)
                .filter(s -> !s.isEmpty()).collect(Collectors.toSet());
        for (Quantizer q : quantizers.values()) {
            if (q.ggufType().isEmpty()) {
                continue;
            }
            int type = q.ggufType().getAsInt();
            Quantizer other = byGgufType.get(type);
            if (other == null || (preferred.contains(q.id()) && !preferred.contains(other.id()))) {
                byGgufType.put(type, q);
            } else if (!preferred.contains(other.id())) {
                throw new PrefillException(PrefillException.Code.PLUGIN, "formats '" + other.id() + "' and '"
                        + q.id() + "' both claim GGUF type " + type + "; choose one with -D" + PROP_FORMAT + "=<id>");
            }
        }
    }

    private static String describe(Plugin p) {
        return p.getClass().getName() + " (" + moduleOf(p) + ")";
    }

    static String moduleOf(Object p) {
        Module m = p.getClass().getModule();
        if (m.isNamed()) {
            return m.getName();
        }
        CodeSource cs = p.getClass().getProtectionDomain().getCodeSource();
        return "classpath:" + (cs == null || cs.getLocation() == null ? "?" : cs.getLocation().getPath());
    }

    private static String versionOf(Object p) {
        Module m = p.getClass().getModule();
        if (m.isNamed() && m.getDescriptor() != null) {
            return m.getDescriptor().rawVersion().orElse("unknown");
        }
        Package pkg = p.getClass().getPackage();
        return pkg != null && pkg.getImplementationVersion() != null ? pkg.getImplementationVersion() : "unknown";
    }

    private static String rootMessage(Throwable e) {
        Throwable t = e;
        while (t.getCause() != null && t.getCause() != t) {
            t = t.getCause();
        }
        return t == e ? String.valueOf(e.getMessage()) : e.getMessage() + " (cause: " + t + ")";
    }

    /** {@return every loaded provider, SPI by SPI, ordered by id} */
    public List<PluginInfo> plugins() {
        return List.copyOf(infos);
    }

    /** {@return providers that were skipped, and why} */
    public List<String> problems() {
        return List.copyOf(problems);
    }

    /** {@return all formats by id} */
    public Map<String, Quantizer> quantizers() {
        return java.util.Collections.unmodifiableMap(quantizers);
    }

    /** {@return the format with this id, if loaded} @param id format id */
    public Optional<Quantizer> quantizer(String id) {
        return Optional.ofNullable(quantizers.get(id));
    }

    /** {@return the format that decodes this GGUF type, if a module provides it} @param type ggml type */
    public Optional<Quantizer> forGgufType(GgmlType type) {
        return Optional.ofNullable(byGgufType.get(type.id()));
    }

    /**
     * {@return the format that decodes a tensor}
     *
     * @param type       the tensor's ggml type
     * @param tensorName the tensor, for the message
     * @throws PrefillException ({@code P4J-MISSING-FORMAT}) naming the module to add
     */
    public Quantizer requireFormat(GgmlType type, String tensorName) {
        return forGgufType(type).orElseThrow(() -> missingFormat(type, "tensor " + tensorName));
    }

    /**
     * {@return the exception for a format no loaded module provides}
     *
     * @param type the ggml type
     * @param what what needs it, e.g. "tensor blk.0.attn_q.weight"
     */
    public static PrefillException missingFormat(GgmlType type, String what) {
        String fix = type.module() == null
                ? "no prefill4j module decodes it yet"
                : "add module " + type.module() + " (artifact dev.prefill4j:"
                        + type.module().substring("dev.prefill4j.".length()).replace('.', '-')
                        + ") to the module path or image";
        return new PrefillException(PrefillException.Code.MISSING_FORMAT,
                what + " is GGUF type " + type.label() + ": " + fix);
    }

    /**
     * Selects the backend.
     *
     * @param explicit an id chosen by the user, or {@code null} to use {@value #PROP_BACKEND} or priority
     * @return the backend
     * @throws PrefillException ({@code P4J-PLUGIN}) if the choice is unknown or unavailable, or none is available
     */
    public Backend selectBackend(String explicit) {
        Backend b = select("backend", backends, explicit, PROP_BACKEND, Backend::priority);
        Availability a = b.availability();
        if (!a.available()) {
            throw new PrefillException(PrefillException.Code.PLUGIN,
                    "backend '" + b.id() + "' is unavailable here: " + a.reason());
        }
        return b;
    }

    /**
     * Selects the attention kernel for a backend.
     *
     * @param backendId the selected backend's id
     * @param explicit  an id chosen by the user, or {@code null}
     * @return the kernel provider
     */
    public Attention selectAttention(String backendId, String explicit) {
        Map<String, Attention> forBackend = new LinkedHashMap<>();
        attentions.forEach((id, a) -> {
            if (a.backendId().equals(backendId)) {
                forBackend.put(id, a);
            }
        });
        return select("attention kernel for backend '" + backendId + "'", forBackend, explicit, PROP_ATTENTION,
                Attention::priority);
    }

    /**
     * Selects the KV store.
     *
     * @param explicit an id chosen by the user, or {@code null}
     * @return the store
     */
    public KVStore selectKVStore(String explicit) {
        return select("KV store", kvStores, explicit, PROP_KV, KVStore::priority);
    }

    private <S extends Plugin> S select(String what, Map<String, S> candidates, String explicit, String property,
                                        ToIntFunction<S> priority) {
        String choice = explicit != null && !explicit.isBlank() ? explicit : prop(property, null);
        S chosen;
        if (choice != null) {
            chosen = candidates.get(choice);
            if (chosen == null) {
                throw new PrefillException(PrefillException.Code.PLUGIN, "no " + what + " with id '" + choice
                        + "'; found: " + (candidates.isEmpty() ? "none" : new TreeSet<>(candidates.keySet()))
                        + " (run 'prefill4j plugins')");
            }
        } else {
            chosen = candidates.values().stream().filter(p -> availability(p).available())
                    .max(Comparator.comparingInt(priority).thenComparing(Plugin::id, Comparator.reverseOrder()))
                    .orElseThrow(() -> new PrefillException(PrefillException.Code.PLUGIN, "no " + what
                            + " is available; add a module that provides one (run 'prefill4j plugins')"));
        }
        S result = Objects.requireNonNull(chosen);
        LOG.log(System.Logger.Level.DEBUG, () -> "selected " + what + ": " + result.id() + " from "
                + moduleOf(result));
        return result;
    }

    /** Configures a {@link PluginRegistry}. @since 0.1 */
    @Api.Stable
    public static final class Builder {
        private boolean discovery = true;
        private ClassLoader classLoader;
        private ModuleLayer layer;
        private final List<Plugin> added = new ArrayList<>();
        private Map<String, String> properties = systemProperties();

        private Builder() {
        }

        private static Map<String, String> systemProperties() {
            Map<String, String> m = new HashMap<>();
            System.getProperties().forEach((k, v) -> m.put(String.valueOf(k), String.valueOf(v)));
            return m;
        }

        /** {@return this} @param on whether to use {@link ServiceLoader} at all (default on) */
        public Builder discovery(boolean on) {
            this.discovery = on;
            return this;
        }

        /** {@return this} @param loader discover through this class loader (class path and its modules) */
        public Builder classLoader(ClassLoader loader) {
            this.classLoader = loader;
            return this;
        }

        /** {@return this} @param layer discover in this module layer (and its parents) */
        public Builder layer(ModuleLayer layer) {
            this.layer = layer;
            return this;
        }

        /** {@return this} @param plugin a provider to add without discovery */
        public Builder add(Plugin plugin) {
            added.add(Objects.requireNonNull(plugin));
            return this;
        }

        /** {@return this} @param props selection properties to use instead of the system properties */
        public Builder properties(Map<String, String> props) {
            this.properties = Map.copyOf(props);
            return this;
        }

        /** {@return the registry} @throws PrefillException on a duplicate id */
        public PluginRegistry build() {
            return new PluginRegistry(this);
        }
    }

}
