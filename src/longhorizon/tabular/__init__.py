"""tabular"""
