import java.io.FileInputStream;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.Collection;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.kafka.clients.admin.AbortTransactionSpec;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.admin.TransactionState;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;

/**
 * Closes the transactions a stopped MirrorMaker 2 left open on one cluster, as
 * {@code kafka-transactions.sh} would (that tool is not in the stack's jars).
 *
 * <p>Why: with exactly-once source support, MM2's workers read their internal topics
 * {@code read_committed}. A transaction left open there by a killed or half-stopped MM2 holds
 * the topic's last stable offset back, and a new MM2's herder waits at "Starting KafkaBasedLog"
 * until it closes; the task that would fence the old producer never starts. Run only while MM2 is
 * stopped:
 *
 * <ol>
 *   <li>ongoing transactions whose transactional id matches the pattern (MM2's) are fenced: the
 *       coordinator bumps the epoch and aborts them, as a new MM2 task would;
 *   <li>transactions still open on a partition of a topic matching the topic pattern, whose
 *       producer has no transaction in flight at its coordinator ("hanging", invisible to
 *       fencing), are aborted by writing the abort marker to that partition.
 * </ol>
 *
 * <p>Arguments: the transactional id regex, the topic regex, then one client properties file
 * (bootstrap.servers and any login) per cluster. Prints one line per transaction closed; exit
 * status 0 on success.
 */
public final class MirrorTransactions {
  private static final Set<TransactionState> IN_FLIGHT =
      EnumSet.of(
          TransactionState.ONGOING,
          TransactionState.PREPARE_ABORT,
          TransactionState.PREPARE_COMMIT,
          TransactionState.PREPARE_EPOCH_FENCE);
  private static final long TIMEOUT_S = 20;
  /** How long an open transaction must have been quiet before it counts as hanging. */
  private static final long QUIET_MS = 2_000;

  public static void main(String[] args) throws Exception {
    if (args.length < 3) {
      System.err.println(
          "usage: MirrorTransactions <id regex> <topic regex> <client.properties>...");
      System.exit(2);
    }
    Pattern ids = Pattern.compile(args[0]);
    Pattern topics = Pattern.compile(args[1]);
    for (int i = 2; i < args.length; i++) {
      Properties props = new Properties();
      try (InputStream in = new FileInputStream(args[i])) {
        props.load(in);
      }
      props.putIfAbsent(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "10000");
      props.putIfAbsent(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "15000");
      String cluster = props.getProperty(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG);
      try (Admin admin = Admin.create(props)) {
        fenceOngoing(admin, ids, cluster);
        abortHanging(admin, topics, cluster);
      }
    }
  }

  private static Collection<TransactionListing> listings(Admin admin) throws Exception {
    return admin.listTransactions().all().get(TIMEOUT_S, TimeUnit.SECONDS);
  }

  private static void fenceOngoing(Admin admin, Pattern ids, String cluster) throws Exception {
    List<String> fence = new ArrayList<>();
    for (TransactionListing listing : listings(admin)) {
      if (listing.state() == TransactionState.ONGOING
          && ids.matcher(listing.transactionalId()).matches()) {
        fence.add(listing.transactionalId());
      }
    }
    if (fence.isEmpty()) {
      return;
    }
    admin.fenceProducers(fence).all().get(TIMEOUT_S, TimeUnit.SECONDS);
    for (String id : fence) {
      System.out.println(cluster + ": fenced the ongoing transaction of " + id);
    }
  }

  private static void abortHanging(Admin admin, Pattern topics, String cluster) throws Exception {
    Set<String> names = new HashSet<>();
    for (String name : admin.listTopics().names().get(TIMEOUT_S, TimeUnit.SECONDS)) {
      if (topics.matcher(name).matches()) {
        names.add(name);
      }
    }
    if (names.isEmpty()) {
      return;
    }
    List<TopicPartition> partitions = new ArrayList<>();
    for (TopicDescription topic :
        admin.describeTopics(names).allTopicNames().get(TIMEOUT_S, TimeUnit.SECONDS).values()) {
      for (TopicPartitionInfo info : topic.partitions()) {
        partitions.add(new TopicPartition(topic.name(), info.partition()));
      }
    }
    // A fenced transaction's markers land within moments: wait for them before judging.
    long deadline = System.currentTimeMillis() + TIMEOUT_S * 1000;
    while (true) {
      Map<Long, TransactionState> coordinator = new HashMap<>();
      for (TransactionListing listing : listings(admin)) {
        coordinator.put(listing.producerId(), listing.state());
      }
      boolean settling = false;
      List<AbortTransactionSpec> hanging = new ArrayList<>();
      long now = System.currentTimeMillis();
      var open = admin.describeProducers(partitions).all().get(TIMEOUT_S, TimeUnit.SECONDS);
      for (var entry : open.entrySet()) {
        for (ProducerState producer : entry.getValue().activeProducers()) {
          if (producer.currentTransactionStartOffset().isEmpty()) {
            continue;
          }
          TransactionState state = coordinator.get(producer.producerId());
          if ((state != null && IN_FLIGHT.contains(state))
              || now - producer.lastTimestamp() < QUIET_MS) {
            settling = true; // closing, or too fresh to judge
            continue;
          }
          hanging.add(
              new AbortTransactionSpec(
                  entry.getKey(),
                  producer.producerId(),
                  (short) producer.producerEpoch(),
                  producer.coordinatorEpoch().orElse(0)));
        }
      }
      for (AbortTransactionSpec spec : hanging) {
        admin.abortTransaction(spec).all().get(TIMEOUT_S, TimeUnit.SECONDS);
        System.out.println(
            cluster
                + ": aborted the hanging transaction of producer "
                + spec.producerId()
                + " on "
                + spec.topicPartition());
      }
      if (!settling || System.currentTimeMillis() > deadline) {
        return;
      }
      Thread.sleep(500);
    }
  }

  private MirrorTransactions() {}
}
