-- Filterer (figure 3 of the Facebook paper): keeps the event types that can make an event
-- trend, and writes them to a derived stream keyed by dimension id. Stateless.
CREATE APPLICATION trending_filterer;

CREATE INPUT TABLE events (
  event_time TIMESTAMP, event_type STRING, dimension_id STRING, text STRING
) FROM STREAM('trending.events') TIME event_time;

INSERT INTO STREAM('trending.filtered')
SELECT event_time, event_type, dimension_id, text, dimension_id AS record_key
FROM events
WHERE event_type IN ('post', 'comment', 'share');
