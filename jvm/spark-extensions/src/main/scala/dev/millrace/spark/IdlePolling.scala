package dev.millrace.spark

import java.lang.reflect.Field
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.sql.execution.streaming.runtime.{StreamExecution, StreamingQueryWrapper}
import org.apache.spark.sql.streaming.{StreamingQueryListener, StreamingQueryManager}
import org.apache.spark.sql.streaming.StreamingQueryListener.{QueryIdleEvent, QueryProgressEvent, QueryStartedEvent, QueryTerminatedEvent}

/**
 * How often the quiet queries of a session ask their sources for new records: after each
 * micro-batch, Spark's polling delay (`spark.sql.streaming.pollingDelay`); once a query has
 * reported itself idle (Spark's idle event, after `noDataProgressEventInterval` without a
 * micro-batch) while its state operators hold no rows, `idleDelayMs`, until its next
 * micro-batch.
 *
 * A query that holds no state has nothing due: no window to close, no id to forget, so no
 * watermark move would change its results, and its next micro-batch waits for a record. Each
 * poll asks every source for its latest offsets, which a quiet app paid for in Kafka requests
 * and in the JIT compiling that code path for minutes (benchmarks/idle_app.py). The cost is
 * the wait: the first record after a quiet spell is read up to `idleDelayMs` after it came.
 *
 * Spark reads the polling delay once, when a query starts; a running query's is its
 * `StreamExecution.pollingDelayMs`, which this sets.
 */
class IdlePolling(queries: StreamingQueryManager, idleDelayMs: Long)
  extends StreamingQueryListener {

  // By run: whether the last progress showed state rows, and the delay a lengthened run had.
  private val holdsState = new ConcurrentHashMap[UUID, java.lang.Boolean]()
  private val lengthened = new ConcurrentHashMap[UUID, java.lang.Long]()

  override def onQueryStarted(event: QueryStartedEvent): Unit = ()

  override def onQueryProgress(event: QueryProgressEvent): Unit = {
    val progress = event.progress
    holdsState.put(progress.runId, progress.stateOperators.exists(_.numRowsTotal > 0))
    Option(lengthened.remove(progress.runId)).foreach(delay => setDelay(progress.id, delay))
  }

  override def onQueryIdle(event: QueryIdleEvent): Unit = {
    if (!holdsState.getOrDefault(event.runId, false) && !lengthened.containsKey(event.runId)) {
      execution(event.id).filter(_.runId == event.runId).foreach { query =>
        val delay = IdlePolling.delayField.getLong(query)
        if (delay < idleDelayMs) {
          lengthened.put(event.runId, delay)
          IdlePolling.delayField.setLong(query, idleDelayMs)
        }
      }
    }
  }

  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = {
    holdsState.remove(event.runId)
    lengthened.remove(event.runId)
  }

  private def setDelay(id: UUID, delayMs: Long): Unit =
    execution(id).foreach(IdlePolling.delayField.setLong(_, delayMs))

  private def execution(id: UUID): Option[StreamExecution] = Option(queries.get(id)).collect {
    case wrapper: StreamingQueryWrapper => wrapper.streamingQuery
    case query: StreamExecution => query
  }
}

object IdlePolling {
  private lazy val delayField: Field = {
    val field = classOf[StreamExecution].getDeclaredField("pollingDelayMs")
    field.setAccessible(true)
    field
  }
}
