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
        List<String[]> table = new ArrayList<>();
        table.add(new String[] {"spi", "id", "module", "version", "api", "description"});
        for (PluginInfo p : registry.plugins()) {
            table.add(new String[] {p.spi(), p.id(), p.module(), p.version(), p.apiVersion(), p.description()
                    + (p.availability().equals("available") ? "" : " [" + p.availability() + "]")});
        }
        // Each column as wide as its longest entry (ids such as q8_0-activations are longer than most), the
        // description last and unpadded.
        int[] width = new int[table.getFirst().length - 1];
        for (String[] row : table) {
            for (int c = 0; c < width.length; c++) {
                width[c] = Math.max(width[c], row[c].length());
            }
        }
        for (String[] row : table) {
            StringBuilder line = new StringBuilder();
            for (int c = 0; c < width.length; c++) {
                line.append(row[c]).append(" ".repeat(width[c] - row[c].length() + 1));
            }
            System.out.println(line.append(row[width.length]));
        }
        for (String problem : registry.problems()) {
            System.out.println("skipped: " + problem);
        }
        return 0;
    }
}
