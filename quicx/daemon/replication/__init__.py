"""High availability: a fenced warm standby, with leadership from a lease store (etcd)."""
