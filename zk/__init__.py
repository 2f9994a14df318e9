"""dprag.zk"""
