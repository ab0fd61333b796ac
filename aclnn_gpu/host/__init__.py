"""(re-exports written by the move)"""
