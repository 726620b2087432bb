package weir;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.types.DataType;

/**
 * Rows repartitioned so that each partition, and so each file a write makes of it, holds the rows
 * of one value of a column: a reader that skips files by that column's statistics then reads only
 * its values' files. Bronze is written and compacted so by {@code event_date_hint}, which a
 * back-fill reads its dates by: a batch of a backlog brings several days, and files written in
 * arrival order would each span them all.
 *
 * <p>Each value gets a share of the partitions in proportion to its weight (rows or bytes), at
 * least one, its rows spread over them by a hash of other columns. Beyond {@link #MOST_GROUPS}
 * values, runs of neighbouring values share their partitions: a batch of event times scattered
 * over years makes that many files, not one per day. The partition of a row is its value's first
 * plus its hash modulo the share, a partition id given to Spark as it is
 * ({@code repartitionById}): a hash or range partitioning of the values would put two of them in
 * one partition, a small value beside a large one. The stream may keep its heaviest value's rows
 * where they are and shuffle only the others'.
 */
public final class ByValue {
  /** At most this many groups of values get partitions of their own. */
  public static final int MOST_GROUPS = 100;

  private ByValue() {}

  /**
   * {@code rows} repartitioned by {@code column}: {@code values} (as text, cast to the column's
   * type; a null stands for the rows where the column is null) with their {@code weights}, over
   * about {@code partitions} partitions, a value's rows spread by the hash of {@code spreadBy}.
   * Every value of the rows must be among {@code values} (one that is not is put with the nulls,
   * or the first). With {@code keepHeaviest}, the rows of the heaviest value stay in the
   * partitions they are in, and only the others' are shuffled: a micro-batch of one day with a
   * few lines of others (late events, lines filed by their ingest date) moves those few. One
   * value: {@code rows} as they are, no shuffle.
   */
  public static Dataset<Row> repartition(Dataset<Row> rows, String column, String[] values,
      long[] weights, int partitions, String[] spreadBy, boolean keepHeaviest) {
    if (values.length <= 1) {
      return rows;
    }
    DataType type = rows.schema().apply(column).dataType();
    Column[] typed = Arrays.stream(values)
        .map(v -> v == null ? null : functions.lit(v).cast(type)).toArray(Column[]::new);
    Column value = functions.col(InsertAbsent.quoted(column));
    int heaviest = 0;
    for (int i = 1; i < weights.length; i++) {
      heaviest = weights[i] > weights[heaviest] ? i : heaviest;
    }
    Column isHeaviest = typed[heaviest] == null ? value.isNull() : value.eqNullSafe(typed[heaviest]);
    // nulls first, then the values in the order of their text: a date's or a number of one
    // width's; for other types runs of neighbouring values are merely runs
    List<Integer> order = new ArrayList<>();
    for (int i = 0; i < values.length; i++) {
      if (!keepHeaviest || i != heaviest) {
        order.add(i);
      }
    }
    order.sort((a, b) -> values[a] == null ? (values[b] == null ? 0 : -1)
        : values[b] == null ? 1 : values[a].compareTo(values[b]));
    int run = (order.size() + MOST_GROUPS - 1) / MOST_GROUPS;
    long total = Arrays.stream(weights).sum();
    List<Column> firsts = new ArrayList<>();
    List<Column> shares = new ArrayList<>();
    Column nullFirst = functions.lit(0);
    Column nullShare = functions.lit(1);
    int next = 0;
    for (int start = 0; start < order.size(); start += run) {
      List<Integer> group = order.subList(start, Math.min(order.size(), start + run));
      long weight = group.stream().mapToLong(i -> weights[i]).sum();
      int share = (int) Math.max(1, Math.round((double) partitions * weight / Math.max(1, total)));
      for (int i : group) {
        if (typed[i] == null) {
          nullFirst = functions.lit(next);
          nullShare = functions.lit(share);
        } else {
          firsts.addAll(List.of(typed[i], functions.lit(next)));
          shares.addAll(List.of(typed[i], functions.lit(share)));
        }
      }
      next += share;
    }
    Column first = lookUp(firsts, value, nullFirst);
    Column share = lookUp(shares, value, nullShare);
    Column spread = functions.xxhash64(Arrays.stream(spreadBy)
        .map(c -> functions.col(InsertAbsent.quoted(c))).toArray(Column[]::new));
    Column id = first.plus(functions.pmod(spread, share)).cast("int");
    if (!keepHeaviest) {
      return rows.repartitionById(next, id);
    }
    return rows.where(isHeaviest)
        .union(rows.where(functions.not(isHeaviest)).repartitionById(next, id));
  }

  /** {@code value}'s entry in {@code pairs} (key, value, key, value ...), else {@code otherwise}. */
  private static Column lookUp(List<Column> pairs, Column value, Column otherwise) {
    if (pairs.isEmpty()) {
      return otherwise;
    }
    Column map = functions.map(pairs.toArray(Column[]::new));
    return functions.coalesce(functions.element_at(map, value), otherwise);
  }
}
