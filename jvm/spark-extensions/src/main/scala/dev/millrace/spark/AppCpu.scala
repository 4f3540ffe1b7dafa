package dev.millrace.spark

import java.lang.management.ManagementFactory
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.{AtomicBoolean, LongAdder}

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.{SparkListener, SparkListenerStageCompleted, SparkListenerStageSubmitted, SparkListenerTaskEnd}

/**
 * The CPU each app of a host (`millrace.ops.host`) uses in the host's JVM, apart from the
 * others': the CPU time of the tasks of its FAIR scheduler pool, counted by [[PoolCpuListener]]
 * as each task ends, and that of its queries' micro-batch threads (`stream execution thread
 * for <app>.<query> ...`), which plan its micro-batches and commit their offsets. What the
 * apps share (the JIT compilers, the garbage collector, the listener bus) is no one app's.
 */
object AppCpu {
  private val poolNanos = new ConcurrentHashMap[String, LongAdder]()
  private val installed = new AtomicBoolean(false)

  /** Counts the tasks' CPU of every pool of `sc` from now on; once per JVM. */
  def install(sc: SparkContext): Unit =
    if (installed.compareAndSet(false, true)) sc.addSparkListener(new PoolCpuListener)

  /**
   * The CPU nanoseconds app `app` used so far: the tasks of pool `app` and its queries'
   * micro-batch threads that still run (a query that ended takes its thread's time along).
   */
  def cpuNanos(app: String): Long = {
    val tasks = Option(poolNanos.get(app)).map(_.sum()).getOrElse(0L)
    val threads = ManagementFactory.getThreadMXBean
    val prefix = s"stream execution thread for $app."
    // Depth 0: the threads' names without their stacks, which would cost far more.
    val loops = threads.getThreadInfo(threads.getAllThreadIds, 0).iterator
      .filter(info => info != null && info.getThreadName.startsWith(prefix))
      .map(info => math.max(0L, threads.getThreadCpuTime(info.getThreadId)))
      .sum
    tasks + loops
  }

  private[spark] def addTask(pool: String, nanos: Long): Unit =
    poolNanos.computeIfAbsent(pool, _ => new LongAdder).add(nanos)
}

/** Adds each task's CPU time (running and deserializing it) to its stage's scheduler pool. */
class PoolCpuListener extends SparkListener {
  private val poolOfStage = new ConcurrentHashMap[Int, String]()

  override def onStageSubmitted(event: SparkListenerStageSubmitted): Unit = {
    val pool = Option(event.properties).flatMap(p => Option(p.getProperty("spark.scheduler.pool")))
    poolOfStage.put(event.stageInfo.stageId, pool.getOrElse("default"))
  }

  override def onTaskEnd(event: SparkListenerTaskEnd): Unit = {
    val metrics = event.taskMetrics
    if (metrics != null) {
      val pool = poolOfStage.getOrDefault(event.stageId, "default")
      AppCpu.addTask(pool, metrics.executorCpuTime + metrics.executorDeserializeCpuTime)
    }
  }

  override def onStageCompleted(event: SparkListenerStageCompleted): Unit =
    poolOfStage.remove(event.stageInfo.stageId)
}
