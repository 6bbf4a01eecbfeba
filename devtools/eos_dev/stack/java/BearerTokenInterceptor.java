package eos.connect;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;

import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

/**
 * Spark Connect 3.5 checks no credential: this interceptor (spark.connect.grpc.interceptor.classes)
 * refuses every call whose "authorization" header is not "Bearer " + the token in the file named
 * by EOS_SPARK_CONNECT_TOKEN_FILE. A 3.5 client sends its token only over TLS, so the stack puts a
 * TLS proxy in front; a client reaching the server's own port without the token is refused too.
 */
public class BearerTokenInterceptor implements ServerInterceptor {
  private static final Metadata.Key<String> AUTHORIZATION =
      Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
  private final byte[] expected;

  public BearerTokenInterceptor() throws java.io.IOException {
    String file = System.getenv("EOS_SPARK_CONNECT_TOKEN_FILE");
    if (file == null || file.isEmpty()) {
      throw new IllegalStateException("EOS_SPARK_CONNECT_TOKEN_FILE is not set");
    }
    String token = new String(Files.readAllBytes(Paths.get(file)), StandardCharsets.UTF_8).trim();
    expected = ("Bearer " + token).getBytes(StandardCharsets.UTF_8);
  }

  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    String given = headers.get(AUTHORIZATION);
    byte[] got = given == null ? new byte[0] : given.getBytes(StandardCharsets.UTF_8);
    if (!MessageDigest.isEqual(got, expected)) {
      call.close(
          Status.UNAUTHENTICATED.withDescription(
              given == null
                  ? "this Spark Connect server needs a bearer token: connect through its TLS "
                      + "endpoint with sc://host:port/;token=<token> (spark.token in the pipelines file)"
                  : "the bearer token was refused: use the server's token (spark.token)"),
          new Metadata());
      return new ServerCall.Listener<Q>() {};
    }
    return next.startCall(call, headers);
  }
}
