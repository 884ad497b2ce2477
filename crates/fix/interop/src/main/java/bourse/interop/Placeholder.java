package bourse.interop;
class Placeholder {}
