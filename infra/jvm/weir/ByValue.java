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
 * one partition, a small value beside a large one.
 *
 * <p>Rows may also be kept where they are: each input partition keeps the rows of one value (its
 * most frequent, as the caller counted), and only the others are shuffled. Landing files arrive
 * in time order and a task reads consecutive ranges of them, so most of a backlog's rows stay.
 */
public final class ByValue {
  /** At most this many groups of values get partitions of their own. */
  public static final int MOST_GROUPS = 100;

  private ByValue() {}

  /**
   * {@code rows} repartitioned by {@code column}: {@code values} (as text, cast to the column's
   * type; a null stands for the rows where the column is null), over about {@code partitions}
   * partitions in proportion to {@code weights} (the rows of each value that move), a value's rows
   * spread by the hash of {@code spreadBy}. {@code keep} (null: none) gives for each of the rows'
   * partitions the index of the value whose rows stay in it, -1 for none. Every value of the rows
   * must be among {@code values} (one that is not is put with the nulls, or the first). Nothing
   * to move: {@code rows} as they are, no shuffle.
   */
  public static Dataset<Row> repartition(Dataset<Row> rows, String column, String[] values,
      long[] weights, int partitions, String[] spreadBy, int[] keep) {
    DataType type = rows.schema().apply(column).dataType();
    Column[] typed = Arrays.stream(values)
        .map(v -> v == null ? null : functions.lit(v).cast(type)).toArray(Column[]::new);
    // nulls first, then the values in the order of their text: a date's or a number of one
    // width's; for other types runs of neighbouring values are merely runs
    List<Integer> order = new ArrayList<>();
    for (int i = 0; i < values.length; i++) {
      if (weights[i] > 0) {
        order.add(i);
      }
    }
    if (order.isEmpty() || keep == null && order.size() == 1) {
      return rows;
    }
    order.sort((a, b) -> values[a] == null ? (values[b] == null ? 0 : -1)
        : values[b] == null ? 1 : values[a].compareTo(values[b]));
    int run = (order.size() + MOST_GROUPS - 1) / MOST_GROUPS;
    long total = Arrays.stream(weights).sum();
    Lookup firsts = new Lookup(0);
    Lookup shares = new Lookup(1);
    int next = 0;
    for (int start = 0; start < order.size(); start += run) {
      List<Integer> group = order.subList(start, Math.min(order.size(), start + run));
      long weight = group.stream().mapToLong(i -> weights[i]).sum();
      int share = (int) Math.max(1, Math.round((double) partitions * weight / total));
      for (int i : group) {
        firsts.put(typed[i], next);
        shares.put(typed[i], share);
      }
      next += share;
    }
    Column value = functions.col(InsertAbsent.quoted(column));
    Column spread = functions.xxhash64(Arrays.stream(spreadBy)
        .map(c -> functions.col(InsertAbsent.quoted(c))).toArray(Column[]::new));
    Column id = firsts.of(value).plus(functions.pmod(spread, shares.of(value))).cast("int");
    if (keep == null) {
      return rows.repartitionById(next, id);
    }
    Lookup indexes = new Lookup(-1);
    for (int i = 0; i < values.length; i++) {
      indexes.put(typed[i], i);
    }
    Column kept = functions.try_element_at(
        functions.array(Arrays.stream(keep).mapToObj(functions::lit).toArray(Column[]::new)),
        functions.spark_partition_id().plus(1));
    Column stays = functions.coalesce(indexes.of(value).equalTo(kept), functions.lit(false));
    return rows.where(stays).union(rows.where(functions.not(stays)).repartitionById(next, id));
  }

  /** A value's number: a map of the non-null values, and the nulls' apart (a map key cannot be
   * null); a value not put gets the nulls', else {@code otherwise}. */
  private static final class Lookup {
    private final List<Column> pairs = new ArrayList<>();
    private int ofNull;

    Lookup(int otherwise) {
      ofNull = otherwise;
    }

    void put(Column value, int number) {
      if (value == null) {
        ofNull = number;
      } else {
        pairs.addAll(List.of(value, functions.lit(number)));
      }
    }

    Column of(Column value) {
      Column otherwise = functions.lit(ofNull);
      if (pairs.isEmpty()) {
        return otherwise;
      }
      Column map = functions.map(pairs.toArray(Column[]::new));
      return functions.coalesce(functions.try_element_at(map, value), otherwise);
    }
  }
}
