package dev.prefill4j.tests;

import static com.tngtech.archunit.base.DescribedPredicate.not;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.INTERFACES;
import static com.tngtech.archunit.core.domain.JavaClass.Predicates.implement;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.classes;
import static com.tngtech.archunit.lang.syntax.ArchRuleDefinition.noClasses;
import static com.tngtech.archunit.library.dependencies.SlicesRuleDefinition.slices;

import com.tngtech.archunit.core.domain.JavaClasses;
import com.tngtech.archunit.core.importer.ClassFileImporter;
import com.tngtech.archunit.core.importer.ImportOption;
import dev.prefill4j.api.Api;
import dev.prefill4j.api.spi.Quantizer;
import java.nio.file.Path;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Architecture rules over the main classes of every module (DESIGN.md §2-4, STYLE.md). */
class ArchitectureTest {
    static JavaClasses all;

    @BeforeAll
    static void importClasses() {
        Path root = Path.of(System.getProperty("prefill4j.root", ".."));
        all = new ClassFileImporter().withImportOption(ImportOption.Predefined.DO_NOT_INCLUDE_TESTS)
                .importPaths(root.resolve("core-api/target/classes"), root.resolve("engine/target/classes"),
                        root.resolve("backend-cpu/target/classes"), root.resolve("cli/target/classes"),
                        root.resolve("quant-q4_0/target/classes"), root.resolve("quant-q4k/target/classes"),
                        root.resolve("quant-bitnet/target/classes"), root.resolve("kvstore-ssd/target/classes"),
                        root.resolve("examples/custom-format/target/classes"));
    }

    @Test
    void coreApiDependsOnJavaBaseOnly() {
        noClasses().that().resideInAPackage("dev.prefill4j.api..")
                .should().dependOnClassesThat().resideOutsideOfPackages("dev.prefill4j.api..", "java.lang..", "java.util..",
                        "java.nio..", "java.io..", "java.math..", "java.time..", "java.net..")
                .check(all);
    }

    /** A plugin module sees core-api and the JDK, nothing of the engine's internals or of another plugin. */
    @Test
    void pluginsDependOnCoreApiOnly() {
        noClasses().that().resideInAnyPackage("dev.prefill4j.backend..", "dev.prefill4j.quant..", "dev.prefill4j.kvstore..",
                        "com.example..")
                .should().dependOnClassesThat().resideInAnyPackage("dev.prefill4j.engine..", "dev.prefill4j.cli..")
                .check(all);
        noClasses().that().resideInAPackage("dev.prefill4j.quant.q4_0..")
                .should().dependOnClassesThat().resideInAnyPackage("dev.prefill4j.quant.q4k..", "dev.prefill4j.backend..")
                .check(all);
        noClasses().that().resideInAPackage("dev.prefill4j.quant.q4k..")
                .should().dependOnClassesThat().resideInAnyPackage("dev.prefill4j.quant.q4_0..", "dev.prefill4j.backend..")
                .check(all);
        noClasses().that().resideInAPackage("dev.prefill4j.backend.cpu..")
                .should().dependOnClassesThat().resideInAnyPackage("dev.prefill4j.quant..", "dev.prefill4j.kvstore..",
                        "dev.prefill4j.backend.metal..")
                .check(all);
    }

    /** Formats are reached through the Quantizer SPI only: no class outside a format package names an implementation. */
    @Test
    void theEngineAndBackendsNeverNameAFormatImplementation() {
        noClasses().that().resideOutsideOfPackages("dev.prefill4j.engine.formats..", "dev.prefill4j.quant..", "com.example..")
                .should().dependOnClassesThat(implement(Quantizer.class).and(not(INTERFACES)))
                .check(all);
    }

    @Test
    void noPackageCycles() {
        slices().matching("dev.prefill4j.(**)").should().beFreeOfCycles().check(all);
    }

    /** Every public top-level type of an exported package states its stability. */
    @Test
    void publicTypesOfExportedPackagesCarryAStabilityAnnotation() {
        classes().that().arePublic().and().areTopLevelClasses()
                .and().resideInAnyPackage("dev.prefill4j.api", "dev.prefill4j.api.spi", "dev.prefill4j.engine",
                        "dev.prefill4j.engine.gguf", "dev.prefill4j.engine.llama2c", "dev.prefill4j.engine.model",
                        "dev.prefill4j.engine.registry", "dev.prefill4j.engine.tokenizer", "dev.prefill4j.engine.quantize")
                .and().doNotHaveSimpleName("package-info")
                .should().beAnnotatedWith(Api.Stable.class).orShould().beAnnotatedWith(Api.Experimental.class)
                .orShould().beAnnotatedWith(Api.Internal.class)
                .check(all);
    }
}
