package engram;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import org.opensearch.analysis.common.CommonAnalysisPlugin;
import org.opensearch.common.settings.Settings;
import org.opensearch.env.Environment;
import org.opensearch.node.InternalSettingsPreparer;
import org.opensearch.node.Node;
import org.opensearch.painless.PainlessPlugin;
import org.opensearch.plugins.Plugin;
import org.opensearch.transport.Netty4Plugin;

/**
 * A single-node OpenSearch for the tests: the HTTP transport, the English analyzer, painless (which k-NN
 * extends) and k-NN, all loaded from the classpath as the test framework's MockNode does.
 *
 * <p>Usage: {@code java -cp "target/classes:target/lib/*" engram.EngramNode HOME HTTP_PORT}. Prints
 * {@code ENGRAM_NODE_STARTED} when it serves, and stops on SIGTERM.
 */
public final class EngramNode {
    private static final class ClasspathNode extends Node {
        ClasspathNode(Environment env, Collection<Class<? extends Plugin>> plugins) {
            super(env, plugins, true);
        }
    }

    public static void main(String[] args) throws Exception {
        Path home = Path.of(args[0]).toAbsolutePath();
        Files.createDirectories(home.resolve("config"));
        Files.createDirectories(home.resolve("plugins"));
        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", home.resolve("data").toString())
            .put("cluster.name", "engram-test")
            .put("node.name", "engram-node")
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", "0")
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .build();
        Environment env = InternalSettingsPreparer.prepareEnvironment(
            settings, Map.of(), home.resolve("config"), () -> "engram-node");
        // k-NN is published as a plugin zip, unpacked next to the other jars at package time, so it is
        // loaded by name rather than compiled against.
        Class<? extends Plugin> knn = Class.forName("org.opensearch.knn.plugin.KNNPlugin").asSubclass(Plugin.class);
        List<Class<? extends Plugin>> plugins = List.of(
            Netty4Plugin.class, CommonAnalysisPlugin.class, PainlessPlugin.class, knn);
        Node node = new ClasspathNode(env, plugins);
        node.start();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
            } catch (Exception ignored) {
                // shutting down anyway
            }
        }));
        System.out.println("ENGRAM_NODE_STARTED");
        Thread.currentThread().join();
    }
}
