package eos.hudi;

import java.util.Collections;
import java.util.Map;

import org.apache.spark.SparkContext;
import org.apache.spark.api.plugin.DriverPlugin;
import org.apache.spark.api.plugin.ExecutorPlugin;
import org.apache.spark.api.plugin.PluginContext;
import org.apache.spark.api.plugin.SparkPlugin;

/**
 * Initializes Hudi's metadata-table payload class when the driver and each executor start.
 *
 * Hudi 1.2.0's HoodieMetadataPayload tells a metadata record's plain schema from the schema with
 * meta fields by object identity with a schema it interns in its static initializer. When a JVM's
 * first metadata-table work is a compaction, the compaction interns its own parsed copy first and
 * every later metadata-table write of that JVM fails (ArrayIndexOutOfBoundsException, issue 17).
 * Initializing the class before any Hudi work keeps the schema caches in step.
 */
public class HudiClassInit implements SparkPlugin {
  static final String PAYLOAD = "org.apache.hudi.metadata.HoodieMetadataPayload";

  static void initialize() {
    try {
      Class.forName(PAYLOAD, true, HudiClassInit.class.getClassLoader());
    } catch (ClassNotFoundException e) {
      // No Hudi on this JVM's classpath: nothing to protect.
    }
  }

  @Override
  public DriverPlugin driverPlugin() {
    return new DriverPlugin() {
      @Override
      public Map<String, String> init(SparkContext sc, PluginContext context) {
        initialize();
        return Collections.emptyMap();
      }
    };
  }

  @Override
  public ExecutorPlugin executorPlugin() {
    return new ExecutorPlugin() {
      @Override
      public void init(PluginContext context, Map<String, String> extraConf) {
        initialize();
      }
    };
  }
}
