package eos.connect;

import java.net.InetSocketAddress;
import java.net.SocketAddress;

import org.sparkproject.connect.grpc.Grpc;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

/**
 * Spark Connect 3.5 has no bind-address setting: its gRPC port listens on every interface. This
 * interceptor (spark.connect.grpc.interceptor.classes) serves only calls whose peer is a loopback
 * address, so the server answers nobody but this machine (a TLS proxy on the same machine, too).
 */
public class LoopbackOnlyInterceptor implements ServerInterceptor {
  @Override
  public <Q, R> ServerCall.Listener<Q> interceptCall(
      ServerCall<Q, R> call, Metadata headers, ServerCallHandler<Q, R> next) {
    SocketAddress peer = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
    if (peer instanceof InetSocketAddress) {
      InetSocketAddress inet = (InetSocketAddress) peer;
      if (inet.getAddress() != null && inet.getAddress().isLoopbackAddress()) {
        return next.startCall(call, headers);
      }
    }
    call.close(
        Status.PERMISSION_DENIED.withDescription(
            "this Spark Connect server serves clients on its own machine only (loopback); "
                + "connect from there, or start it with EOS_SPARK_CONNECT_REMOTE=1"),
        new Metadata());
    return new ServerCall.Listener<Q>() {};
  }
}
