-- Ranker (figure 3 of the Facebook paper): the top 3 events per topic in each 10-second
-- window, by the Scorer's trending score. The result table is what `millrace query` and
-- GET /apps/trending_ranker/tables/top_events serve.
CREATE APPLICATION trending_ranker;

CREATE INPUT TABLE scores (
  event_time TIMESTAMP, event STRING, topic STRING, score DOUBLE, pane_count BIGINT
) FROM STREAM('trending.scores') TIME event_time LATENESS '5 seconds';

CREATE TABLE top_events AS
SELECT topic, TOPK(event, score, 3) AS top_events, COUNT(*) AS scored_events
FROM scores [10 seconds]
GROUP BY topic;
