package dev.prefill4j.cli;

import dev.prefill4j.engine.registry.PluginInfo;
import dev.prefill4j.engine.registry.PluginRegistry;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code prefill4j plugins}: every discovered format, backend, attention kernel and KV store. */
@Command(name = "plugins", mixinStandardHelpOptions = true,
        description = "List every discovered weight format, backend, attention kernel and KV store with its id, "
                + "module and version, and any provider that was skipped and why.")
final class PluginsCommand implements Callable<Integer> {
    @Option(names = "--json", description = "Print JSON.")
    boolean json;

    @Option(names = "--verbose", description = "Print stack traces and the registry's log.")
    boolean verbose;

    @Override
    public Integer call() {
        PluginRegistry registry = PluginRegistry.load();
        if (json) {
            List<Map<String, Object>> rows = new ArrayList<>();
            for (PluginInfo p : registry.plugins()) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("spi", p.spi());
                r.put("id", p.id());
                r.put("module", p.module());
                r.put("version", p.version());
                r.put("api_version", p.apiVersion());
                r.put("availability", p.availability());
                r.put("description", p.description());
                rows.add(r);
            }
            Map<String, Object> doc = new LinkedHashMap<>();
            doc.put("plugins", rows);
            doc.put("problems", registry.problems());
            System.out.print(Json.write(doc));
            return 0;
        }
        System.out.printf("%-10s %-10s %-28s %-16s %-5s %s%n", "spi", "id", "module", "version", "api", "description");
        for (PluginInfo p : registry.plugins()) {
            System.out.printf("%-10s %-10s %-28s %-16s %-5s %s%s%n", p.spi(), p.id(), p.module(), p.version(),
                    p.apiVersion(), p.description(), p.availability().equals("available") ? "" : " [" + p.availability() + "]");
        }
        for (String problem : registry.problems()) {
            System.out.println("skipped: " + problem);
        }
        return 0;
    }
}
