package eos.hudi;

import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;

import org.apache.hudi.client.transaction.ConcurrentOperation;
import org.apache.hudi.client.transaction.SimpleConcurrentFileWritesConflictResolutionStrategy;
import org.apache.hudi.common.model.HoodieCommitMetadata;
import org.apache.hudi.common.table.HoodieTableMetaClient;
import org.apache.hudi.common.table.timeline.HoodieInstant;
import org.apache.hudi.common.table.timeline.HoodieTimeline;
import org.apache.hudi.common.util.Option;
import org.apache.hudi.config.HoodieWriteConfig;
import org.apache.hudi.exception.HoodieWriteConflictException;
import org.apache.hudi.table.HoodieTable;

/**
 * Fences a transactional writer whose starting checkpoint is no longer the table's latest.
 *
 * Runs under Hudi's commit lock (optimistic concurrency control): any completed commit that
 * carries a source checkpoint and completed after the commit this write started from is a
 * conflict, whatever files it touched, so two writers that planned the same ranges can never
 * both commit. File-level conflicts are still detected as by Hudi's default strategy.
 */
public class CheckpointFencingStrategy
    extends SimpleConcurrentFileWritesConflictResolutionStrategy {
  public static final String EXPECTED = "hoodie.eos.fencing.expected.completion";
  private static final String[] CHECKPOINT_KEYS = {
    "streamer.checkpoint.key.v2", "deltastreamer.checkpoint.key"
  };

  private final Set<String> fencedBy = new HashSet<>();
  private String expected = "";

  @Override
  public Stream<HoodieInstant> getCandidateInstants(
      HoodieTableMetaClient metaClient,
      HoodieInstant current,
      Option<HoodieInstant> lastSuccessful,
      Option<HoodieWriteConfig> config) {
    List<HoodieInstant> files =
        super.getCandidateInstants(metaClient, current, lastSuccessful)
            .collect(Collectors.toList());
    if (!config.isPresent() || !config.get().getProps().containsKey(EXPECTED)) {
      return files.stream();
    }
    expected = config.get().getProps().getString(EXPECTED, "");
    HoodieTimeline timeline =
        metaClient.reloadActiveTimeline().getCommitsTimeline().filterCompletedInstants();
    List<HoodieInstant> moved =
        timeline.getInstantsAsStream()
            .filter(i -> !i.requestedTime().equals(current.requestedTime()))
            .filter(i -> expected.isEmpty() || completedAfter(i, expected))
            .filter(i -> carriesCheckpoint(timeline, i))
            .collect(Collectors.toList());
    for (HoodieInstant i : moved) {
      fencedBy.add(i.requestedTime());
    }
    return Stream.concat(files.stream(), moved.stream().filter(i -> !files.contains(i)));
  }

  private static boolean completedAfter(HoodieInstant instant, String expected) {
    String done = instant.getCompletionTime();
    return (done != null ? done : instant.requestedTime()).compareTo(expected) > 0;
  }

  private static boolean carriesCheckpoint(HoodieTimeline timeline, HoodieInstant instant) {
    try {
      Map<String, String> extra = timeline.readCommitMetadata(instant).getExtraMetadata();
      for (String key : CHECKPOINT_KEYS) {
        String value = extra.get(key);
        if (value != null && !value.isEmpty()) {
          return true;
        }
      }
      return false;
    } catch (Exception e) {
      return true; // unreadable: treat as a writer that moved the table, never as no conflict
    }
  }

  @Override
  public boolean hasConflict(
      ConcurrentOperation thisOperation, ConcurrentOperation otherOperation) {
    return fencedBy.contains(otherOperation.getInstantTimestamp())
        || super.hasConflict(thisOperation, otherOperation);
  }

  @Override
  public Option<HoodieCommitMetadata> resolveConflict(
      HoodieTable table, ConcurrentOperation thisOperation, ConcurrentOperation otherOperation) {
    if (fencedBy.contains(otherOperation.getInstantTimestamp())) {
      throw new HoodieWriteConflictException(
          "eos-fenced: commit " + otherOperation.getInstantTimestamp()
              + " moved the table's checkpoint after this write started from "
              + (expected.isEmpty() ? "a new table" : "the commit completed at " + expected)
              + "; instant " + thisOperation.getInstantTimestamp() + " is not committed");
    }
    return super.resolveConflict(table, thisOperation, otherOperation);
  }
}
