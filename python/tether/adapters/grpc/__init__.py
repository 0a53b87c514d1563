"""The gRPC protocol package: a family adapter that drives a remote robot host's RobotControl
service (`tether.adapters.grpc.remote`). Generic packages never import it."""
