package dev.millrace.spark

import java.nio.file.Files
import java.nio.file.attribute.PosixFilePermission

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FSDataInputStream, LocalFileSystem, Path, PathFilter, RawLocalFileSystem}
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.spark.sql.execution.streaming.checkpointing.{CheckpointFileManager, FileSystemBasedCheckpointFileManager}
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream

/**
 * Hadoop's local file system without a process per file written.
 *
 * Without Hadoop's native library (PySpark ships none), Hadoop's local file system sets a new
 * file's permissions by running `chmod`, a process started from the JVM for every file and
 * its checksum file. This one sets them through Java's own file API. Checkpoint files reach it
 * through [[LocalCheckpointFileManager]]. Given as Spark's `fs.file.impl` it stopped the driver
 * from starting: Spark reads the local file system (to fetch its jars) before millrace's jar
 * is on its class path.
 */
class NioLocalFileSystem extends LocalFileSystem(new NioRawLocalFileSystem)

/** The raw local file system of [[NioLocalFileSystem]]: permissions set without `chmod`. */
class NioRawLocalFileSystem extends RawLocalFileSystem {
  override def setPermission(path: Path, permission: FsPermission): Unit =
    Files.setPosixFilePermissions(pathToFile(path).toPath, NioRawLocalFileSystem.posix(permission))
}

object NioRawLocalFileSystem {
  // Java's order, owner's read first: the bits of an octal mode from 0400 down to 0001.
  private val ByBit = PosixFilePermission.values.toSeq.zipWithIndex.map {
    case (permission, index) => (1 << (8 - index), permission)
  }

  /** The POSIX permissions of `permission`'s mode (its sticky bit aside). */
  def posix(permission: FsPermission): java.util.Set[PosixFilePermission] = {
    val mode = permission.toShort.toInt
    val set = java.util.EnumSet.noneOf(classOf[PosixFilePermission])
    ByBit.foreach { case (bit, posixPermission) => if ((mode & bit) != 0) set.add(posixPermission) }
    set
  }
}

/**
 * Spark's checkpoint files through Hadoop's `FileSystem` and [[NioLocalFileSystem]] on the
 * local file system, Spark's own choice (its `FileContext`) elsewhere. Spark gets it as
 * `spark.sql.streaming.checkpointFileManagerClass`.
 *
 * Spark prefers `FileContext` for its atomic rename over an existing file. On the local file
 * system that rename asks whether the target is a symbolic link by running `readlink`, and
 * each new file runs `chmod` (see [[NioLocalFileSystem]]): 60 processes started from the JVM
 * for each micro-batch of a windowed count (counted from /proc/stat); the demo's host spent
 * 0.055 of a core in the JVM's "process reaper" threads alone (benchmarks/demo_cost.py). A
 * local rename is atomic through `FileSystem` too (POSIX `rename`); HDFS, S3 and the others
 * keep Spark's choice.
 */
class LocalCheckpointFileManager(path: Path, hadoopConf: Configuration)
    extends CheckpointFileManager {

  private val delegate: CheckpointFileManager =
    if (path.getFileSystem(hadoopConf).getScheme == "file") {
      val local = new Configuration(hadoopConf)
      local.setClassLoader(getClass.getClassLoader)
      local.set("fs.file.impl", classOf[NioLocalFileSystem].getName)
      // Hadoop caches one file system per scheme: the cached one is Hadoop's own.
      local.setBoolean("fs.file.impl.disable.cache", true)
      new FileSystemBasedCheckpointFileManager(path, local)
    } else {
      val sparksChoice = new Configuration(hadoopConf)
      sparksChoice.unset(LocalCheckpointFileManager.ClassKey)
      CheckpointFileManager.create(path, sparksChoice)
    }

  override def createAtomic(
      path: Path,
      overwriteIfPossible: Boolean): CancellableFSDataOutputStream =
    delegate.createAtomic(path, overwriteIfPossible)

  override def open(path: Path): FSDataInputStream = delegate.open(path)

  override def list(path: Path, filter: PathFilter): Array[FileStatus] = delegate.list(path, filter)

  override def mkdirs(path: Path): Unit = delegate.mkdirs(path)

  override def exists(path: Path): Boolean = delegate.exists(path)

  override def delete(path: Path): Unit = delegate.delete(path)

  override def isLocal: Boolean = delegate.isLocal

  override def createCheckpointDirectory(): Path = delegate.createCheckpointDirectory()

  override def close(): Unit = delegate.close()
}

object LocalCheckpointFileManager {
  /** Spark's setting that names the checkpoint file manager, copied to Hadoop's configuration. */
  val ClassKey = "spark.sql.streaming.checkpointFileManagerClass"
}
