package weir;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FileAlreadyExistsException;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The local file system as Hadoop's {@code FileContext} sees it ({@code file:} paths), in place of
 * Hadoop's {@code LocalFs}: the same checksummed files, with a rename that never replaces a file it
 * was told not to replace, and that starts no process.
 *
 * <p>Every Delta commit is such a rename: the version's JSON is written to a temporary file, then
 * renamed to {@code _delta_log/N.json} unless that file exists, which is how two writers learn that
 * they raced for version N (Delta's {@code HDFSLogStore}). So is every file of a stream's
 * checkpoint (its offsets, commits and state). Hadoop's local rename checks the target, then calls
 * rename(2), which replaces a file: two writers that both pass the check both "succeed", and the
 * first one's file is gone. Delta locks around it only within one JVM, and only for a file system
 * it recognises as raw local, which the default checksummed one is not. Weir writes one table from
 * several JVMs (a stream's driver, a back-fill, maintenance): six threads renaming to one name at
 * the same moment had two winners in 2 rounds of 20 with Hadoop's. Here the rename is a hard link,
 * which link(2) makes atomically and refuses when the target exists, then the removal of the source
 * name.
 *
 * <p>Hadoop's raw local file system starts a process where the JVM can answer: a {@code readlink}
 * to ask whether a rename's source and target are symbolic links (unless a test turns on another
 * path), a {@code chmod} to set the permission of every file and folder it creates (without
 * Hadoop's native library, which Spark does not ship). A Delta commit that changes only a property
 * started 40 processes, each about 6 ms on two cores; a driver run of 24 small batches started
 * 2,580 {@code readlink} and 704 {@code chmod}. Here the JVM answers for a path that is not a
 * symbolic link (Delta's and Spark's never are) and sets the nine permission bits itself.
 *
 * <p>Spark takes it through {@code spark.hadoop.fs.AbstractFileSystem.file.impl}
 * ({@code spark_jobs.session}); the {@code FileSystem} API ({@code fs.file.impl}) is Hadoop's.
 */
public final class LocalFs extends ChecksumFs {
  public LocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
    super(new Raw(uri, conf));
  }

  /** Hadoop's {@code RawLocalFs} (its three overrides are copied), with the rename above. */
  static final class Raw extends DelegateToFileSystem {
    Raw(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new Unforked(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    @Deprecated
    public FsServerDefaults getServerDefaults() throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public FsServerDefaults getServerDefaults(Path f) throws IOException {
      return LocalConfigKeys.getServerDefaults();
    }

    @Override
    public boolean isValidName(String src) {
      return true;  // the operating system judges a local name
    }

    private java.nio.file.Path local(Path path) {
      return ((RawLocalFileSystem) fsImpl).pathToFile(path).toPath();
    }

    /**
     * A file renamed to a name that is not a directory: without {@code overwrite}, by link(2) and
     * unlink(2), so that of writers racing for one name exactly one wins and the others get
     * {@code FileAlreadyExistsException}; with it, by rename(2), which replaces atomically. A
     * crash between the link and the unlink leaves the source name behind as well (a temporary
     * file, which Delta and Spark ignore). Anything else is Hadoop's rename.
     */
    @Override
    public void renameInternal(Path src, Path dst, boolean overwrite) throws IOException {
      java.nio.file.Path from = local(src);
      java.nio.file.Path to = local(dst);
      if (!Files.isRegularFile(from, LinkOption.NOFOLLOW_LINKS) || Files.isDirectory(to)) {
        super.renameInternal(src, dst, overwrite);
        return;
      }
      if (overwrite) {
        Files.move(from, to, StandardCopyOption.ATOMIC_MOVE);
        return;
      }
      try {
        Files.createLink(to, from);
      } catch (java.nio.file.FileAlreadyExistsException e) {
        throw new FileAlreadyExistsException("Rename destination " + dst + " already exists.");
      } catch (NoSuchFileException e) {
        throw (FileNotFoundException) new FileNotFoundException(
            "Rename: " + src + " or the folder of " + dst + " does not exist").initCause(e);
      }
      Files.delete(from);
    }
  }

  /** Hadoop's raw local file system, with the two answers above given by the JVM. */
  static final class Unforked extends RawLocalFileSystem {
    private static final PosixFilePermission[] BITS = {  // from 0400 down to 0001
      PosixFilePermission.OWNER_READ, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_EXECUTE};

    @Override
    public FileStatus getFileLinkStatus(Path f) throws IOException {
      if (Files.isSymbolicLink(pathToFile(f).toPath())) {
        return super.getFileLinkStatus(f);
      }
      return getFileStatus(f);
    }

    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      if ((mode & ~0777) != 0) {  // sticky, setuid or setgid: Hadoop's chmod
        super.setPermission(p, permission);
        return;
      }
      Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
      for (int i = 0; i < BITS.length; i++) {
        if ((mode & (0400 >> i)) != 0) {
          bits.add(BITS[i]);
        }
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), bits);
    }
  }
}
