package dev.prefill4j.tests;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.io.IOException;
import java.lang.module.ModuleDescriptor;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.jar.JarFile;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * Class-path users see providers through META-INF/services; module-path users through module-info's
 * {@code provides}. For every prefill4j jar the two must list the same providers.
 */
class ServiceMirrorTest {
    @Test
    void metaInfServicesMirrorsModuleInfo() throws IOException {
        List<Path> jars = new ArrayList<>();
        jars.add(Cli.cliJar());
        try (Stream<Path> s = Files.list(Cli.modules())) {
            s.filter(p -> p.getFileName().toString().matches("(core-api|engine|backend-.*|quant-.*|kvstore-.*)-.*\\.jar"))
                    .forEach(jars::add);
        }
        assertFalse(jars.size() < 4, "expected the prefill4j jars in " + Cli.modules());
        for (Path jar : jars) {
            try (JarFile jf = new JarFile(jar.toFile())) {
                ModuleDescriptor d = ModuleDescriptor.read(jf.getInputStream(jf.getEntry("module-info.class")));
                Map<String, TreeSet<String>> fromModule = new TreeMap<>();
                d.provides().forEach(p -> fromModule.put(p.service(), new TreeSet<>(p.providers())));
                Map<String, TreeSet<String>> fromServices = new TreeMap<>();
                jf.stream().filter(e -> e.getName().startsWith("META-INF/services/") && !e.isDirectory()).forEach(e -> {
                    try {
                        String text = new String(jf.getInputStream(e).readAllBytes(), StandardCharsets.UTF_8);
                        TreeSet<String> names = new TreeSet<>();
                        text.lines().map(l -> l.replaceAll("#.*", "").trim()).filter(l -> !l.isEmpty()).forEach(names::add);
                        fromServices.put(e.getName().substring("META-INF/services/".length()), names);
                    } catch (IOException ex) {
                        throw new AssertionError(ex);
                    }
                });
                assertEquals(fromModule, fromServices, jar.getFileName() + ": META-INF/services differs from module-info");
            }
        }
    }
}
