-- The Facebook paper's figure 2, adapted: top events per category over 5-minute windows,
-- and a stateless filter that derives a stream of Super Bowl posts.
CREATE APPLICATION top_events;

CREATE INPUT TABLE events_score (
  event_time TIMESTAMP, event STRING, category STRING, score DOUBLE
) FROM STREAM('events_stream') TIME event_time LATENESS '30 seconds';

CREATE TABLE top_events_5min AS
SELECT category, TOPK(event, score, 3) AS top_events, COUNT(*) AS n, SUM(score) AS total_score
FROM events_score [5 minutes]
GROUP BY category;

INSERT INTO STREAM('superbowl_posts')
SELECT * FROM events_score WHERE category = 'sports' AND event LIKE '%#superbowl%';
