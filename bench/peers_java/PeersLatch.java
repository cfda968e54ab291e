// One candidate of bench/peers.py: Curator's LeaderLatch (what Storm and Spark use).
//
// Usage: java -cp <wheel jars>:<classes> PeersLatch CONNECT PATH SESSION_MS ID
// Prints "queued <epoch ms>" once the latch has started and "I lead <epoch ms>" when it
// becomes leader; SIGTERM runs a shutdown hook that closes the latch (its node is deleted at
// once: the graceful hand-over) and then the client (its session). Each "poll N" line on
// stdin is answered "poll N L <epoch ms>" when latch.hasLeadership(), else "poll N F ..."
// (bench/peers.py's slow-disk column).
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.LeaderLatchListener;
import org.apache.curator.retry.ExponentialBackoffRetry;

public final class PeersLatch {
    private static synchronized void say(String what) {
        System.out.println(what + " " + System.currentTimeMillis());
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        String path = args[1];
        int sessionMs = Integer.parseInt(args[2]);
        String id = args[3];
        // Storm's defaults: connection timeout 15 s, retries every 1 s, 5 times.
        CuratorFramework client = CuratorFrameworkFactory.builder()
                .connectString(connect)
                .sessionTimeoutMs(sessionMs)
                .connectionTimeoutMs(Math.min(15000, sessionMs))
                .retryPolicy(new ExponentialBackoffRetry(1000, 5))
                .build();
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.addListener(new LeaderLatchListener() {
            @Override
            public void isLeader() {
                say("I lead");
            }

            @Override
            public void notLeader() {
                say("not leader");
            }
        });
        CountDownLatch closed = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                latch.close();
            } catch (Exception e) {
                say("latch close failed: " + e);
            }
            client.close();
            say("closed");
            closed.countDown();
        }));
        Thread polls = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(
                    new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null) {
                    String[] parts = line.trim().split(" ");
                    if (parts.length == 2 && parts[0].equals("poll")) {
                        say("poll " + parts[1] + (latch.hasLeadership() ? " L" : " F"));
                    }
                }
            } catch (IOException e) {
                // stdin closed: nobody polls
            }
        }, "polls");
        polls.setDaemon(true);
        client.start();
        latch.start();
        polls.start();
        say("queued");
        closed.await();
    }
}
