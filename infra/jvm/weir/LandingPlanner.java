package weir;

/**
 * The driver side of Weir's landing source ({@link LandingSource}): the manifest of discovered
 * files, offsets and admission control, implemented in Python ({@code spark_jobs.landing}) and
 * called through py4j. Offsets are JSON strings ({@code {"manifest": id, "file": i, "byte": b}}).
 */
public interface LandingPlanner {
  /** The bound of a micro-batch in bytes (the catalog's {@code max_bytes_per_trigger}). */
  long maxBytesPerTrigger();

  String initialOffset();

  /** The end of the next micro-batch from {@code start}: at most {@code maxBytes} further, or
   * everything discovered when {@code maxBytes} is negative. */
  String latestOffset(String start, long maxBytes);

  /** The end of everything discovered so far, null before the first discovery. */
  String reportLatestOffset();

  void prepareForTriggerAvailableNow();

  /** The tasks reading {@code (start, end]}, at least {@code minPartitions} of them where the
   * range is large enough: a JSON list of partitions, each a list of file ranges
   * {@code {"path", "source", "size", "mtime_ns", "start", "end"}}. */
  String partitions(String start, String end, int minPartitions);
}
